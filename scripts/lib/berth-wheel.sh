# Sourced by the suites that install berth-store (needs $root): sets berth_wheel to the
# platform wheel scripts/dist built into ${BERTH_WHEELS:-${CARGO_TARGET_DIR:-target}/dist}
# (both transports, the bytes a user installs), or stops saying how to build it.
berth_wheel_dir="${BERTH_WHEELS:-${CARGO_TARGET_DIR:-$root/target}/dist}"
shopt -s nullglob
berth_wheel_found=("$berth_wheel_dir"/berth_store-*-abi3-*.whl)
shopt -u nullglob
if [ "${#berth_wheel_found[@]}" -ne 1 ]; then
  echo "$(basename "$(dirname "$0")"): expected one berth-store platform wheel in $berth_wheel_dir, found ${#berth_wheel_found[@]} (scripts/dist --debug builds it)" >&2
  exit 1
fi
berth_wheel="${berth_wheel_found[0]}"
