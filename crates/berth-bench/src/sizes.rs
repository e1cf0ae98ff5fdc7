//! How much each workload does, per profile. `Quick` is the smoke run (under 2 minutes
//! on a 2-core machine), `Full` the published one (under 20), `Tiny` the test's (seconds).

/// A named size of run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// A few seconds: the CI smoke test. Figures mean nothing.
    Tiny,
    Quick,
    Full,
}

impl Profile {
    pub fn name(self) -> &'static str {
        match self {
            Profile::Tiny => "tiny",
            Profile::Quick => "quick",
            Profile::Full => "full",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Sizes {
    /// Interleaved rounds of W1–W5.
    pub rounds: usize,
    /// W1: durable single-event appends per round and variant.
    pub appends: usize,
    /// W2: events per round, in batches of `bulk_batch_events`.
    pub bulk_events: usize,
    pub bulk_batch_events: usize,
    /// W3: sessions of `list_events` events each, listed in pages of `list_page`.
    pub list_sessions: usize,
    pub list_events: usize,
    pub list_page: usize,
    /// W3: single-session fetches (record + events) per round and variant.
    pub fetches: usize,
    /// W3: durable creates (a session with `list_events` events) per round and variant.
    pub creates: usize,
    /// W4: events in the resumed session, and resumes per variant per round.
    pub resume_events: usize,
    pub resume_repeats: usize,
    /// W5: sessions, concurrent writers per session, appends per writer per round.
    pub concurrent_sessions: usize,
    pub writers_per_session: usize,
    pub appends_per_writer: usize,
    /// W6: concurrent HTTP clients, session counts, appends per client per round.
    pub http_clients: usize,
    pub http_sessions: Vec<usize>,
    pub http_appends_per_client: usize,
    /// W7: log lengths at which append latency and resume time are measured.
    pub scale_log_lengths: Vec<u64>,
    /// W7: durable single-event appends measured at each log length.
    pub scale_appends: usize,
    /// W7: catalog sizes at which a listing page is timed, and pages timed per size.
    pub scale_list_sessions: Vec<u64>,
    pub scale_list_pages: usize,
    /// W7: counts of idle open write handles at which resident memory is read.
    pub scale_open_sessions: Vec<u64>,
    /// W8: items in the searched namespace; durable puts and gets per round and variant;
    /// repeats of each search shape per round; items in each round's forgotten scope.
    pub memory_items: usize,
    pub memory_puts: usize,
    pub memory_gets: usize,
    pub memory_search_repeats: usize,
    pub memory_forget_items: usize,
}

impl Sizes {
    pub fn of(profile: Profile) -> Sizes {
        match profile {
            Profile::Tiny => Sizes {
                rounds: 1,
                appends: 4,
                bulk_events: 200,
                bulk_batch_events: 100,
                list_sessions: 30,
                list_events: 10,
                list_page: 10,
                fetches: 3,
                creates: 2,
                resume_events: 100,
                resume_repeats: 1,
                concurrent_sessions: 2,
                writers_per_session: 2,
                appends_per_writer: 2,
                http_clients: 2,
                http_sessions: vec![1, 2],
                http_appends_per_client: 2,
                scale_log_lengths: vec![1, 100],
                scale_appends: 3,
                scale_list_sessions: vec![20, 40],
                scale_list_pages: 2,
                scale_open_sessions: vec![5, 10],
                memory_items: 300,
                memory_puts: 3,
                memory_gets: 5,
                memory_search_repeats: 1,
                memory_forget_items: 50,
            },
            Profile::Quick => Sizes {
                rounds: 3,
                appends: 200,
                bulk_events: 10_000,
                bulk_batch_events: 100,
                list_sessions: 2_000,
                list_events: 10,
                list_page: 100,
                fetches: 100,
                creates: 10,
                resume_events: 10_000,
                resume_repeats: 5,
                concurrent_sessions: 8,
                writers_per_session: 8,
                appends_per_writer: 5,
                http_clients: 32,
                http_sessions: vec![8, 64],
                http_appends_per_client: 5,
                scale_log_lengths: vec![1, 100, 1_000, 10_000, 100_000],
                scale_appends: 30,
                scale_list_sessions: vec![1_000, 10_000],
                scale_list_pages: 20,
                scale_open_sessions: vec![100, 1_000],
                memory_items: 20_000,
                memory_puts: 50,
                memory_gets: 200,
                memory_search_repeats: 5,
                memory_forget_items: 2000,
            },
            Profile::Full => Sizes {
                rounds: 7,
                appends: 2_000,
                bulk_events: 100_000,
                bulk_batch_events: 100,
                list_sessions: 10_000,
                list_events: 10,
                list_page: 100,
                fetches: 500,
                creates: 50,
                resume_events: 10_000,
                resume_repeats: 8,
                concurrent_sessions: 8,
                writers_per_session: 8,
                appends_per_writer: 40,
                http_clients: 32,
                http_sessions: vec![8, 64],
                http_appends_per_client: 30,
                scale_log_lengths: vec![1, 10, 100, 1_000, 10_000, 100_000, 1_000_000],
                scale_appends: 200,
                scale_list_sessions: vec![1_000, 10_000, 100_000, 1_000_000],
                scale_list_pages: 100,
                scale_open_sessions: vec![100, 1_000, 10_000],
                memory_items: 100_000,
                memory_puts: 200,
                memory_gets: 1000,
                memory_search_repeats: 10,
                memory_forget_items: 10_000,
            },
        }
    }
}
