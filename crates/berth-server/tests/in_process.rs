//! The in-process server (the Python package's embedded transport): `shutdown` returns
//! only once its background tasks have ended, so a host that drops its runtime right
//! after never has one of them polled mid-shutdown (tokio's timer panics then: seen in
//! CI as the sweeper's `Interval::tick` panicking during a store's close).

mod common;

use berth_server::in_process::InProcessServer;
use berth_server::metrics::Metrics;
use common::{open_service_with, test_config};
use std::time::Duration;

#[test]
fn shutdown_waits_for_the_background_tasks_before_the_runtime_goes() {
    for _ in 0..20 {
        let scratch = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let server = runtime.block_on(async {
            let service = open_service_with(scratch.path(), &Metrics::new(), |service| service).await;
            let config = berth_server::ServerConfig {
                sweep_interval: Some(Duration::from_millis(1)),
                writer_idle_close: Some(Duration::from_millis(1)),
                ..test_config()
            };
            InProcessServer::start(config, service, None)
        });
        runtime.block_on(async { tokio::time::sleep(Duration::from_millis(5)).await }); // both tasks ticked
        assert_eq!(server.background_tasks(), 2);
        runtime.block_on(server.shutdown()).unwrap();
        assert_eq!(server.background_tasks(), 0);
        drop(runtime);
    }
}
