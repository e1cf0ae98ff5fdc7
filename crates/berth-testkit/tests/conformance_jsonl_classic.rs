//! The LogStore and live-write-path conformance suites on classic logs (log format
//! version 1, `preallocate: false`): what every log created before preallocation was
//! the default is, and what `berth serve --preallocate-logs off` creates.

use berth_jsonl::JsonlOptions;
use berth_testkit::conformance::JsonlConformance;

fn classic() -> JsonlConformance {
    JsonlConformance::with_options(JsonlOptions { preallocate: false, ..JsonlOptions::default() })
}

berth_testkit::logstore_conformance!(classic());
berth_testkit::live_write_conformance!(classic());
