//! The LogStore and live-write-path conformance suites on the embedded JSONL backend
//! (a temporary data root per test, default options: fsync per append, preallocated logs).

use berth_testkit::conformance::JsonlConformance;

berth_testkit::logstore_conformance!(JsonlConformance::new());
berth_testkit::live_write_conformance!(JsonlConformance::new());
