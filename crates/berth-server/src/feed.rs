//! Change notification for live tails: "session K's log now ends at seq N".
//!
//! The server publishes after every append it stores; each tail subscribes before it
//! reads, then sleeps until the next notification (or its heartbeat), so nothing
//! busy-polls. `ChangeFeed` is the seam: `LocalFeed` serves one process; a backend shared
//! by several servers (PostgreSQL) plugs in a feed that also hears of appends made by the
//! other servers (`berth::PostgresFeed`, fed by `LISTEN`/`NOTIFY`).

use async_trait::async_trait;
use berth_core::{Result, SessionKey};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::watch;

/// Where tails learn that a session's log grew.
#[async_trait]
pub trait ChangeFeed: Send + Sync + 'static {
    /// Starts watching `key`. The receiver holds the latest known next seq (0 = none).
    /// A feed backed by a database can fail here (`Unavailable`).
    async fn subscribe(&self, key: &SessionKey) -> Result<Subscription>;
    /// Announces that `key`'s log now ends before `next_seq`.
    fn publish(&self, key: &SessionKey, next_seq: u64);
}

/// One tail's subscription; unsubscribes when dropped.
pub struct Subscription {
    receiver: Option<watch::Receiver<u64>>,
    on_drop: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl Subscription {
    pub fn new(receiver: watch::Receiver<u64>, on_drop: Option<Box<dyn FnOnce() + Send + Sync>>) -> Subscription {
        Subscription { receiver: Some(receiver), on_drop }
    }

    /// Waits until a publish happens after the last call (or the feed goes away).
    pub async fn changed(&mut self) {
        match self.receiver.as_mut() {
            Some(receiver) => {
                if receiver.changed().await.is_err() {
                    // The feed dropped this session's channel: never wake again.
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending::<()>().await,
        }
    }

    /// Marks the current value seen, so `changed` waits for the next publish.
    pub fn mark_seen(&mut self) {
        if let Some(receiver) = self.receiver.as_mut() {
            receiver.borrow_and_update();
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        drop(self.receiver.take());
        if let Some(on_drop) = self.on_drop.take() {
            on_drop();
        }
    }
}

type Channels = Mutex<HashMap<SessionKey, watch::Sender<u64>>>;

/// The in-process feed: one `watch` channel per watched session, removed when its last
/// tail goes away (so memory is bounded by the open tails).
#[derive(Default)]
pub struct LocalFeed {
    channels: Arc<Channels>,
}

impl LocalFeed {
    pub fn new() -> LocalFeed {
        LocalFeed::default()
    }

    /// Sessions with at least one tail (tests, metrics).
    pub fn watched(&self) -> usize {
        lock(&self.channels).len()
    }
}

fn lock(channels: &Channels) -> std::sync::MutexGuard<'_, HashMap<SessionKey, watch::Sender<u64>>> {
    channels.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[async_trait]
impl ChangeFeed for LocalFeed {
    async fn subscribe(&self, key: &SessionKey) -> Result<Subscription> {
        let receiver = lock(&self.channels).entry(key.clone()).or_insert_with(|| watch::channel(0).0).subscribe();
        let channels: Weak<Channels> = Arc::downgrade(&self.channels);
        let key = key.clone();
        let on_drop = move || {
            if let Some(channels) = channels.upgrade() {
                let mut channels = lock(&channels);
                if channels.get(&key).is_some_and(|sender| sender.receiver_count() == 0) {
                    channels.remove(&key);
                }
            }
        };
        Ok(Subscription::new(receiver, Some(Box::new(on_drop))))
    }

    fn publish(&self, key: &SessionKey, next_seq: u64) {
        if let Some(sender) = lock(&self.channels).get(key) {
            sender.send_modify(|latest| *latest = (*latest).max(next_seq));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::{SessionId, TenantId};

    fn key(id: &str) -> SessionKey {
        SessionKey::new(TenantId::parse("t").unwrap(), SessionId::parse(id).unwrap())
    }

    #[tokio::test]
    async fn publish_wakes_subscribers_and_channels_are_dropped_with_the_last_tail() {
        let feed = LocalFeed::new();
        let mut first = feed.subscribe(&key("a")).await.unwrap();
        let second = feed.subscribe(&key("a")).await.unwrap();
        assert_eq!(feed.watched(), 1);
        first.mark_seen();
        feed.publish(&key("b"), 3);
        feed.publish(&key("a"), 5);
        tokio::time::timeout(std::time::Duration::from_secs(5), first.changed()).await.unwrap();
        drop(second);
        assert_eq!(feed.watched(), 1);
        drop(first);
        assert_eq!(feed.watched(), 0);
    }
}
