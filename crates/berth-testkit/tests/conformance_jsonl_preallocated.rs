//! The LogStore and live-write-path conformance suites on the embedded JSONL backend with
//! preallocated logs (log format version 2), preallocating from a handle's first append:
//! every log written here carries a zero tail while a writer holds it.

use berth_jsonl::JsonlOptions;
use berth_testkit::conformance::JsonlConformance;

fn preallocated() -> JsonlConformance {
    JsonlConformance::with_options(JsonlOptions {
        preallocate: true,
        preallocate_after_appends: 0,
        ..JsonlOptions::default()
    })
}

berth_testkit::logstore_conformance!(preallocated());
berth_testkit::live_write_conformance!(preallocated());
