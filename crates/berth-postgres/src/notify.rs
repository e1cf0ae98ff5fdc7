//! Live tail support: waiting for new events of a session without polling hard.
//!
//! An append that commits updates this process's subscribers at once and queues a
//! `NOTIFY` for other processes. The queue coalesces (the latest next seq per session)
//! and is sent by one background task in one statement, *after* the appends committed:
//! a `NOTIFY` inside the append transaction would take PostgreSQL's database-wide
//! notification lock until the commit is flushed, serialising every appender's fsync.
//! That statement runs with `synchronous_commit = off`: a lost notification costs a
//! wake-up, never data.
//!
//! Subscribers of a process share one dedicated `LISTEN` connection (not from the
//! pool). After it reconnects, and every `listen_backstop` as a backstop for a lost
//! notification, it re-reads the next seq of every subscribed session.

use crate::db::{Database, Failure};
use crate::schema::NOTIFY_CHANNEL;
use berth_core::{Error, Result, SessionId, SessionKey, TenantId};
use futures_util::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, watch, Notify};
use tokio_postgres::AsyncMessage;

const SEND_NOTIFICATIONS: &str =
    "SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, payload) FROM unnest($2::text[]) AS payload";

const NEXT_SEQS: &str = "SELECT h.tenant, h.session_id, h.next_seq FROM session_heads h \
     JOIN unnest($1::text[], $2::text[]) AS wanted(tenant, session_id) \
       ON h.tenant = wanted.tenant AND h.session_id = wanted.session_id";

/// A session's name on the notification channel: 128 bits of SHA-256 over the tenant
/// and session ids. `NOTIFY` is outside row-level security — any role that may connect
/// to the database may `LISTEN` — so payloads carry no tenant or session id: a listener
/// learns only that *some* session grew, unless it already knows both ids (and then
/// only when, not what). Listeners map the digests of the sessions they subscribed to.
pub(crate) fn route(key: &SessionKey) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(b"berth-notify\0");
    hasher.update(key.tenant.as_str().as_bytes());
    hasher.update(b"\0");
    hasher.update(key.id.as_str().as_bytes());
    hasher.finalize()[..16].iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The notification payload: `<route> <next_seq>`.
fn payload(key: &SessionKey, next_seq: u64) -> String {
    format!("{} {next_seq}", route(key))
}

fn parse_payload(text: &str) -> Option<(&str, u64)> {
    let mut parts = text.split(' ');
    let route = parts.next().filter(|route| route.len() == 32 && route.bytes().all(|byte| byte.is_ascii_hexdigit()))?;
    let next_seq = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((route, next_seq))
}

#[derive(Debug)]
pub(crate) struct Hub {
    db: Arc<Database>,
    subscribers: Mutex<HashMap<SessionKey, watch::Sender<u64>>>,
    /// Notification route → subscribed session (see `route`).
    routes: Mutex<HashMap<String, SessionKey>>,
    pending: Mutex<HashMap<SessionKey, u64>>,
    wake_notifier: Notify,
    notifier_started: AtomicBool,
    listener_started: AtomicBool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Hub {
    pub(crate) fn new(db: Arc<Database>) -> Arc<Hub> {
        Arc::new(Hub {
            db,
            subscribers: Mutex::new(HashMap::new()),
            routes: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            wake_notifier: Notify::new(),
            notifier_started: AtomicBool::new(false),
            listener_started: AtomicBool::new(false),
        })
    }

    /// Raises a session's known next seq for its subscribers (never lowers it).
    pub(crate) fn publish_local(&self, key: &SessionKey, next_seq: u64) {
        let mut subscribers = lock(&self.subscribers);
        if let Some(sender) = subscribers.get(key) {
            if sender.receiver_count() == 0 {
                subscribers.remove(key);
                return;
            }
            sender.send_if_modified(|known| {
                let raise = next_seq > *known;
                if raise {
                    *known = next_seq;
                }
                raise
            });
        }
    }

    /// An append (or materialization) committed: wake local subscribers, and queue a
    /// notification for other processes.
    pub(crate) fn appended(self: &Arc<Self>, key: &SessionKey, next_seq: u64) {
        self.publish_local(key, next_seq);
        if !self.db.options.notify {
            return;
        }
        {
            let mut pending = lock(&self.pending);
            let known = pending.entry(key.clone()).or_insert(next_seq);
            *known = (*known).max(next_seq);
        }
        if !self.notifier_started.swap(true, Ordering::AcqRel)
            && self.db.exec.spawn(notifier_loop(Arc::downgrade(self))).is_none()
        {
            self.notifier_started.store(false, Ordering::Release);
        }
        self.wake_notifier.notify_one();
    }

    pub(crate) async fn subscribe(self: &Arc<Self>, key: &SessionKey) -> Result<watch::Receiver<u64>> {
        if !self.listener_started.swap(true, Ordering::AcqRel)
            && self.db.exec.spawn(listener_loop(Arc::downgrade(self))).is_none()
        {
            self.listener_started.store(false, Ordering::Release);
            return Err(Error::Unavailable { reason: "live tail needs a tokio runtime".into() });
        }
        let receiver = {
            let mut subscribers = lock(&self.subscribers);
            match subscribers.get(key) {
                Some(sender) => sender.subscribe(),
                None => {
                    let (sender, receiver) = watch::channel(0);
                    subscribers.insert(key.clone(), sender);
                    lock(&self.routes).insert(route(key), key.clone());
                    receiver
                }
            }
        };
        // Registered first, read second: an append committing in between is seen by one
        // of the two.
        let keys = vec![key.clone()];
        let db = self.db.clone();
        let current = self
            .db
            .exec
            .run(async move { next_seqs(&db, &keys).await.map_err(|failure| failure.into_error("subscribe")) })
            .await?;
        for (key, next_seq) in current {
            self.publish_local(&key, next_seq);
        }
        Ok(receiver)
    }

    fn subscribed_keys(&self) -> Vec<SessionKey> {
        let mut subscribers = lock(&self.subscribers);
        subscribers.retain(|_, sender| sender.receiver_count() > 0);
        lock(&self.routes).retain(|_, key| subscribers.contains_key(key));
        subscribers.keys().cloned().collect()
    }
}

async fn next_seqs(db: &Database, keys: &[SessionKey]) -> Result<Vec<(SessionKey, u64)>, Failure> {
    // One transaction per tenant: row-level security lets none read two.
    let mut by_tenant: HashMap<&TenantId, Vec<String>> = HashMap::new();
    for key in keys {
        by_tenant.entry(&key.tenant).or_default().push(key.id.to_string());
    }
    let mut found = Vec::new();
    for (tenant, sessions) in by_tenant {
        let tenants: Vec<String> = vec![tenant.to_string(); sessions.len()];
        let rows = db
            .with_tenant("read next seqs", tenant.as_str(), move |client| {
                Box::pin(async move { Ok(client.query(NEXT_SEQS, &[&tenants, &sessions]).await?) })
            })
            .await?;
        for row in rows {
            let (Ok(tenant), Ok(session)) = (TenantId::parse(row.get(0)), SessionId::parse(row.get(1))) else {
                continue;
            };
            let next_seq: i64 = row.get(2);
            found.push((SessionKey::new(tenant, session), next_seq.max(0) as u64));
        }
    }
    Ok(found)
}

/// At most one notification statement per this interval and process: the first append
/// after a quiet spell is announced at once, a burst is coalesced (one statement, the
/// latest next seq per session), so busy writers pay a small fraction of a statement per
/// append. 50 ms is well inside the live write path's own window (`LIVE_WINDOW_MS`).
const NOTIFY_INTERVAL_MIN: Duration = Duration::from_millis(50);

/// Sends queued notifications, coalesced, until the hub is gone.
async fn notifier_loop(hub: Weak<Hub>) {
    let mut last_sent: Option<tokio::time::Instant> = None;
    loop {
        if let Some(sent) = last_sent {
            tokio::time::sleep_until(sent + NOTIFY_INTERVAL_MIN).await;
        }
        let Some(strong) = hub.upgrade() else { return };
        let batch: Vec<String> = {
            let mut pending = lock(&strong.pending);
            pending.drain().map(|(key, next_seq)| payload(&key, next_seq)).collect()
        };
        if batch.is_empty() {
            // Bounded, so the task notices (within a second) that its backend is gone.
            let _ = tokio::time::timeout(Duration::from_secs(1), strong.wake_notifier.notified()).await;
            continue;
        }
        let db = strong.db.clone();
        drop(strong);
        last_sent = Some(tokio::time::Instant::now());
        let outcome = async {
            let client = db.pooled("notify").await?;
            let work = async { Ok(client.execute(SEND_NOTIFICATIONS, &[&NOTIFY_CHANNEL, &batch]).await?) };
            let outcome = db.timed("notify", db.options.statement_timeout, work).await;
            db.settle(client, &outcome);
            outcome
        }
        .await;
        if let Err(failure) = outcome {
            tracing::debug!(?failure, "sending live-tail notifications failed (listeners catch up later)");
        }
    }
}

/// Keeps one `LISTEN` connection open and routes notifications to subscribers.
async fn listener_loop(hub: Weak<Hub>) {
    loop {
        let Some(strong) = hub.upgrade() else { return };
        let db = strong.db.clone();
        drop(strong);
        if let Err(failure) = listen_once(&db, &hub).await {
            tracing::debug!(?failure, "live-tail listener connection ended; reconnecting");
        }
        if hub.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn listen_once(db: &Arc<Database>, hub: &Weak<Hub>) -> Result<(), Failure> {
    let connect = db.config.connect(tokio_postgres::NoTls);
    let (client, mut connection) = match tokio::time::timeout(db.options.connect_timeout, connect).await {
        Ok(outcome) => outcome?,
        Err(_) => return Err(Failure::Timeout("listen connect")),
    };
    let (sender, mut messages) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        let mut stream = futures_util::stream::poll_fn(move |context| connection.poll_message(context));
        while let Some(message) = stream.next().await {
            let failed = message.is_err();
            if sender.send(message).is_err() || failed {
                return;
            }
        }
    });
    let outcome = async {
        db.timed("listen", db.options.statement_timeout, async {
            Ok(client.batch_execute(&format!("LISTEN {NOTIFY_CHANNEL}")).await?)
        })
        .await?;
        let mut backstop = tokio::time::interval(db.options.listen_backstop);
        loop {
            tokio::select! {
                message = messages.recv() => match message {
                    Some(Ok(AsyncMessage::Notification(notification))) => {
                        let Some(hub) = hub.upgrade() else { return Ok(()) };
                        if let Some((route, next_seq)) = parse_payload(notification.payload()) {
                            let key = lock(&hub.routes).get(route).cloned();
                            if let Some(key) = key {
                                hub.publish_local(&key, next_seq);
                            }
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(error)) => return Err(Failure::Db(error)),
                    None => return Err(Failure::Pool("listen connection closed".into())),
                },
                // The first tick is immediate: catch up after (re)connecting.
                _ = backstop.tick() => {
                    let Some(strong) = hub.upgrade() else { return Ok(()) };
                    let keys = strong.subscribed_keys();
                    drop(strong);
                    for (key, next_seq) in next_seqs(db, &keys).await? {
                        if let Some(hub) = hub.upgrade() {
                            hub.publish_local(&key, next_seq);
                        }
                    }
                }
            }
        }
    }
    .await;
    driver.abort();
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_round_trips_and_rejects_garbage() {
        let key = SessionKey::new(TenantId::parse("t-1").unwrap(), SessionId::parse("s.2~x").unwrap());
        let text = payload(&key, 42);
        assert!(!text.contains("t-1") && !text.contains("s.2~x"), "no ids in a payload: {text}");
        assert_eq!(parse_payload(&text), Some((route(&key).as_str(), 42)));
        let other = SessionKey::new(TenantId::parse("t-2").unwrap(), SessionId::parse("s.2~x").unwrap());
        assert_ne!(route(&key), route(&other));
        let route_text = route(&key);
        for garbage in
            ["", "t", "t s", "t s x", "t s 1 2", "t/ s 1", &format!("{route_text} x"), &format!("{route_text} 1 2")]
        {
            assert_eq!(parse_payload(garbage), None, "{garbage:?}");
        }
    }
}
