//! Golden files: a serialized format pinned by a committed file. `assert_golden` compares
//! the bytes a test produced with the file byte for byte, and, when the environment has
//! `BERTH_BLESS`, first rewrites the file with them (review the diff, then commit it).
//! Std only, so the lowest crates' tests can use it without pulling the stack in.

use std::path::{Path, PathBuf};

/// The golden file `name` of the crate whose manifest directory is `manifest_dir`
/// (pass `env!("CARGO_MANIFEST_DIR")`): `<manifest_dir>/tests/golden/<name>`.
pub fn golden_path(manifest_dir: &str, name: &str) -> PathBuf {
    PathBuf::from(manifest_dir).join("tests/golden").join(name)
}

/// Panics, showing both sides, unless `bytes` are exactly the file at `path` (which
/// `BERTH_BLESS` rewrites first). `what` names the format in the message.
pub fn assert_golden(path: &Path, what: &str, bytes: &[u8]) {
    if std::env::var_os("BERTH_BLESS").is_some() {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create the golden folder");
        }
        std::fs::write(path, bytes).expect("write the golden file");
    }
    let golden = std::fs::read(path).unwrap_or_default();
    assert!(
        bytes == golden.as_slice(),
        "{what} differs from {}; review the change and bless it (BERTH_BLESS=1)\nnow:\n{}\ngolden:\n{}",
        path.display(),
        String::from_utf8_lossy(bytes),
        String::from_utf8_lossy(&golden)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_bytes_pass_and_other_bytes_fail() {
        let dir = std::env::temp_dir().join(format!("berth-golden-{}", std::process::id()));
        let path = dir.join("sample.txt");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&path, b"one\n").unwrap();
        if std::env::var_os("BERTH_BLESS").is_none() {
            assert_golden(&path, "sample", b"one\n");
            let differs = std::panic::catch_unwind(|| assert_golden(&path, "sample", b"two\n"));
            assert!(differs.is_err(), "other bytes must fail");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
