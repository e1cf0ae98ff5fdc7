//! The loopback load generator (`berth-loadgen`, W6's assembly) runs both modes.

use berth_bench::loadgen::{measure, LoadOptions, Mode};

/// A smoke run of the load generator (no timing assertion: figures belong in benchmarks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_generator_runs_both_modes() {
    let dir = tempfile::tempdir().unwrap();
    let options = LoadOptions { clients: 4, sessions: 2, seconds: 1, warmup_seconds: 0 };
    for mode in [Mode::Library, Mode::Http] {
        let figures = measure(mode, &options, &dir.path().join(format!("{mode:?}"))).await.unwrap();
        assert!(figures.appends > 0, "{mode:?}: {figures:?}");
        assert!(figures.p50_ms <= figures.p99_ms);
    }
}
