//! The live-tail feed of servers that share a PostgreSQL database: a tail connected to
//! one server hears of appends made through any other (the backend's `LISTEN`/`NOTIFY`
//! hub, with its periodic re-read as a backstop). The in-process `LocalFeed` would only
//! hear of appends made through its own server.

use async_trait::async_trait;
use berth_core::{Result, SessionKey};
use berth_postgres::PostgresBackend;
use berth_server::feed::{ChangeFeed, Subscription};

pub struct PostgresFeed {
    backend: PostgresBackend,
}

impl PostgresFeed {
    pub fn new(backend: PostgresBackend) -> PostgresFeed {
        PostgresFeed { backend }
    }
}

#[async_trait]
impl ChangeFeed for PostgresFeed {
    async fn subscribe(&self, key: &SessionKey) -> Result<Subscription> {
        // The hub drops a session's channel once its last receiver is gone.
        Ok(Subscription::new(self.backend.subscribe(key).await?, None))
    }

    fn publish(&self, key: &SessionKey, next_seq: u64) {
        // Appends through this process's backend already woke its subscribers (and told
        // the other processes); this carries the server's other wake-ups (a deletion).
        self.backend.announce(key, next_seq);
    }
}
