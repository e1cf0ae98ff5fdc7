//! Prometheus metrics of one server instance (`/metrics`): requests and their
//! latencies per route, appends, fsyncs and open files of the embedded backend, open
//! write handles, live tails, run-lease takeovers, rate-limited and unauthenticated
//! requests.
//!
//! One registry per server (not a process-global recorder), so tests that run several
//! servers in one process read each server's own figures.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub method: String,
    pub route: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub method: String,
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TakeoverLabels {
    /// `abandoned` (its lease lapsed) or `interrupted` (`on_busy=interrupt`).
    pub reason: String,
}

/// The embedded backend's fsyncs and open files, fed by whoever opens the backend
/// (`berth serve` wraps its file system in `berth_jsonl::CountingFs` reporting here).
#[derive(Clone, Default)]
pub struct StorageCounters {
    pub fsyncs: Counter,
    pub files_open: Gauge,
}

pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub latency: Family<RouteLabels, Histogram>,
    pub append_batches: Counter,
    pub appended_events: Counter,
    pub storage: StorageCounters,
    pub write_handles_open: Gauge,
    pub tails_open: Gauge,
    pub run_lease_takeovers: Family<TakeoverLabels, Counter>,
    pub rate_limited: Counter,
    pub unauthenticated: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("berth");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register("http_requests", "HTTP requests answered", requests.clone());
        let latency = Family::<RouteLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
        });
        registry.register(
            "http_request_duration_seconds",
            "Time to answer an HTTP request (streams: time to open)",
            latency.clone(),
        );
        let append_batches = Counter::default();
        registry.register("append_batches", "Append requests stored", append_batches.clone());
        let appended_events = Counter::default();
        registry.register("appended_events", "Events stored by appends", appended_events.clone());
        let storage = StorageCounters::default();
        registry.register("storage_fsyncs", "fsync/fdatasync calls of the embedded backend", storage.fsyncs.clone());
        registry.register(
            "storage_files_open",
            "Files the embedded backend holds open (logs, locks, directories)",
            storage.files_open.clone(),
        );
        let write_handles_open = Gauge::default();
        registry.register(
            "write_handles_open",
            "Sessions with an open write handle (writer lease held)",
            write_handles_open.clone(),
        );
        let tails_open = Gauge::default();
        registry.register("tails_open", "Open live-tail (SSE) streams", tails_open.clone());
        let run_lease_takeovers = Family::<TakeoverLabels, Counter>::default();
        registry.register(
            "run_lease_takeovers",
            "Runs detached to make room for a new attach",
            run_lease_takeovers.clone(),
        );
        let rate_limited = Counter::default();
        registry.register("rate_limited", "Requests refused with 429", rate_limited.clone());
        let unauthenticated = Counter::default();
        registry.register("unauthenticated", "Requests refused with 401", unauthenticated.clone());
        Metrics {
            registry,
            requests,
            latency,
            append_batches,
            appended_events,
            storage,
            write_handles_open,
            tails_open,
            run_lease_takeovers,
            rate_limited,
            unauthenticated,
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    pub fn observe_request(&self, method: &str, route: &str, status: u16, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels { method: method.to_owned(), route: route.to_owned(), status })
            .inc();
        self.latency
            .get_or_create(&RouteLabels { method: method.to_owned(), route: route.to_owned() })
            .observe(seconds);
    }

    pub fn takeover(&self, reason: &str) {
        self.run_lease_takeovers.get_or_create(&TakeoverLabels { reason: reason.to_owned() }).inc();
    }
}
