//! State-machine property test: random operation sequences against the LogStore and
//! against a plain in-memory model (`conformance::model`), on the memory backend and on
//! the JSONL backend in a temporary data root.

use berth_testkit::conformance::model::{op_strategy, run_model};
use berth_testkit::conformance::{JsonlConformance, MemoryConformance};
use proptest::collection::vec;
use proptest::prelude::*;

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().expect("runtime")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn memory_store_matches_the_model(ops in vec(op_strategy(), 1..48)) {
        paused_runtime().block_on(run_model(&MemoryConformance::new(), &ops));
    }
}

proptest! {
    // Every case is a fresh data root with fsync per append: fewer cases.
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn jsonl_store_matches_the_model(ops in vec(op_strategy(), 1..48)) {
        paused_runtime().block_on(run_model(&JsonlConformance::new(), &ops));
    }
}
