//! The LogStore and live-write-path conformance suites on the in-memory backend, plus
//! the memory-only clauses that need its storage hooks.

use berth_testkit::conformance::MemoryConformance;

berth_testkit::logstore_conformance!(MemoryConformance::new());
berth_testkit::live_write_conformance!(MemoryConformance::new());

mod memory_only {
    use berth_core::Error;
    use berth_store::Access;
    use berth_testkit::assert_matches;
    use berth_testkit::conformance::fixtures::{header, one_turn_log};
    use berth_testkit::conformance::{ConformanceBackend, MemoryConformance};

    /// R-P2 monotonic reads, the failing side: a read handle that already saw events
    /// refuses to serve a log that shrank underneath it (here: physically erased),
    /// instead of silently showing an older state.
    #[tokio::test(start_paused = true)]
    async fn read_handle_refuses_a_shrunken_log() {
        let backend = MemoryConformance::new();
        let store = backend.store().await;
        let header = header("shrinks");
        let key = header.key();
        let writer = store.create(header).await.unwrap();
        writer.append(&one_turn_log()).await.unwrap();
        writer.close().await.unwrap();
        let reader = store.open(&key, Access::Read).await.unwrap();
        assert_eq!(reader.read(0, None).await.unwrap().len(), 6);
        assert!(backend.storage().erase(&key));
        assert_matches!(reader.read(0, None).await, Err(Error::Corrupt { .. }));
        assert_matches!(reader.read_before(u64::MAX, 2).await, Err(Error::Corrupt { .. }));
        assert_matches!(reader.read_before(4, 1).await, Err(Error::Corrupt { .. }));
        assert_eq!(reader.read(6, None).await.unwrap(), [], "reads past what it saw are still fine");
        assert_eq!(reader.read_before(0, 5).await.unwrap(), [], "nothing is before seq 0");
    }
}
