//! The writer lease (R-G2): acquisition and takeover, renewal in the background, the
//! local deadline after which a holder stops on its own, and release.
//!
//! The database clock decides when a lease lapses (`lease_until`, set with `now()` of
//! the server); the holder's monotonic clock (`std::time::Instant`, never the tokio
//! clock, which tests may pause) decides when it stops writing: at the *send* time of
//! its last successful renewal plus the TTL minus a margin. The server's `now()` of that
//! renewal is later than its send time, so the holder stops at least `margin` before
//! the database could grant the lease to anyone else. Stopping early is a courtesy; the
//! epoch check of every append is what keeps data safe.

use crate::db::{millis, to_i64, to_u64, Database, Failure};
use berth_core::{Error, Result, SessionHeader, SessionKey, WriteHolder};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// `SET LOCAL lock_timeout` is a utility statement without parameters; the value is
/// built from an integer, never from input.
fn set_lock_timeout(milliseconds: i64) -> String {
    format!("SET LOCAL lock_timeout = {}", milliseconds.max(1))
}

/// Takes a free or lapsed lease, or re-takes one this same holder token took (a
/// retried acquisition whose first reply was lost), and bumps the epoch.
const ACQUIRE: &str = "UPDATE session_heads \
     SET epoch = epoch + 1, holder = $3, lease_until = now() + $4::bigint * interval '1 millisecond' \
     WHERE tenant = $1 AND session_id = $2 \
       AND (lease_until IS NULL OR lease_until < now() OR holder = $3) \
     RETURNING epoch, next_seq, header_json";

/// The first stored event of a reserved type this build does not know and its writer
/// did not mark ignorable: the log was written by a newer berth (fail closed).
const UNKNOWN_RESERVED: &str = "SELECT line FROM events \
     WHERE tenant = $1 AND session_id = $2 AND NOT ignorable AND NOT (event_type = ANY($3)) \
       AND (event_type = 'checkpoint' OR event_type LIKE ANY($4)) \
     ORDER BY seq LIMIT 1";

const RENEW: &str = "UPDATE session_heads SET lease_until = now() + $4::bigint * interval '1 millisecond' \
     WHERE tenant = $1 AND session_id = $2 AND epoch = $3 RETURNING 1";

const RELEASE: &str = "UPDATE session_heads SET holder = NULL, lease_until = NULL \
     WHERE tenant = $1 AND session_id = $2 AND epoch = $3";

const CURRENT_EPOCH: &str = "SELECT epoch FROM session_heads WHERE tenant = $1 AND session_id = $2";

/// What an acquisition returns.
pub(crate) struct Acquired {
    pub(crate) epoch: u64,
    pub(crate) next_seq: u64,
    pub(crate) header: SessionHeader,
}

fn reserved_patterns() -> Vec<String> {
    let mut patterns: Vec<String> =
        berth_core::vocabulary::RESERVED_NAMESPACES.iter().map(|namespace| format!("{namespace}%")).collect();
    patterns.push("checkpoint/%".into());
    patterns
}

fn known_types() -> Vec<String> {
    berth_core::vocabulary::KNOWN_EVENT_TYPES.iter().map(|known| known.to_string()).collect()
}

/// Acquires the lease in one transaction; nothing changes if the log holds an event
/// this build must refuse. `AlreadyOwned` if held (or its row is locked by a stalled
/// holder past `lock_timeout`), `NotFound` if absent.
pub(crate) async fn acquire(db: &Database, key: &SessionKey, holder: &str) -> Result<Acquired, Failure> {
    let ttl = millis(db.options.lease_ttl);
    let lock_timeout = millis(db.options.lock_timeout);
    let set_tenant = crate::db::set_tenant_local(key.tenant.as_str(), db.skipping_tenant_setting())?;
    let mut client = db.client().await?;
    let work = async {
        let transaction = client.transaction().await?;
        transaction.batch_execute(&format!("{}; {set_tenant}", set_lock_timeout(lock_timeout))).await?;
        let tenant = key.tenant.as_str();
        let session = key.id.as_str();
        let row = match transaction.query_opt(ACQUIRE, &[&tenant, &session, &holder, &ttl]).await {
            Err(error) if error.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) => {
                return Err(Failure::Berth(Error::AlreadyOwned {
                    id: key.id.to_string(),
                    holder: WriteHolder::AnotherProcess,
                }))
            }
            outcome => outcome?,
        };
        let Some(row) = row else {
            let exists = transaction.query_opt(CURRENT_EPOCH, &[&tenant, &session]).await?.is_some();
            return Err(Failure::Berth(if exists {
                Error::AlreadyOwned { id: key.id.to_string(), holder: WriteHolder::AnotherProcess }
            } else {
                Error::session_not_found(&key.id)
            }));
        };
        let unknown =
            transaction.query_opt(UNKNOWN_RESERVED, &[&tenant, &session, &known_types(), &reserved_patterns()]).await?;
        if let Some(unknown) = unknown {
            let line: String = unknown.get(0);
            let event: berth_core::Event = crate::log::decode_event(key, None, &line)?;
            berth_core::vocabulary::check_stored(&event)?;
        }
        let acquired = Acquired {
            epoch: to_u64("epoch", row.get(0))?,
            next_seq: to_u64("next seq", row.get(1))?,
            header: crate::log::decode_header(key, row.get(2))?,
        };
        transaction.commit().await?;
        Ok(acquired)
    };
    let outcome = db.timed("acquire lease", db.options.statement_timeout, work).await;
    if outcome.as_ref().is_err_and(Failure::poisons_connection) {
        crate::db::discard(client);
    }
    outcome
}

/// Extends the lease if `epoch` still holds it: `Ok(false)` when it was taken over
/// (or the session erased).
pub(crate) async fn renew(db: &Database, key: &SessionKey, epoch: u64) -> Result<bool, Failure> {
    let ttl = millis(db.options.lease_ttl);
    let epoch = to_i64("epoch", epoch)?;
    let (tenant, session) = (key.tenant.to_string(), key.id.to_string());
    let limit = db.options.renew_timeout();
    db.with_tenant_within("renew lease", key.tenant.as_str(), limit, false, move |client| {
        Box::pin(async move {
            let statement = client.prepare_cached(RENEW).await?;
            Ok(client.query_opt(&statement, &[&tenant, &session, &epoch, &ttl]).await?.is_some())
        })
    })
    .await
}

/// Clears the lease if `epoch` still holds it.
pub(crate) async fn release(db: &Database, key: &SessionKey, epoch: u64) -> Result<(), Failure> {
    let epoch = to_i64("epoch", epoch)?;
    let (tenant, session) = (key.tenant.to_string(), key.id.to_string());
    db.with_tenant("release lease", key.tenant.as_str(), move |client| {
        Box::pin(async move {
            let statement = client.prepare_cached(RELEASE).await?;
            client.execute(&statement, &[&tenant, &session, &epoch]).await?;
            Ok(())
        })
    })
    .await
}

/// The epoch stored now, `None` if the session is gone.
pub(crate) async fn current_epoch(db: &Database, key: &SessionKey) -> Result<Option<u64>, Failure> {
    let (tenant, session) = (key.tenant.to_string(), key.id.to_string());
    db.with_tenant("read lease", key.tenant.as_str(), move |client| {
        Box::pin(async move {
            let row = client.query_opt(CURRENT_EPOCH, &[&tenant, &session]).await?;
            row.map(|row| to_u64("epoch", row.get(0))).transpose()
        })
    })
    .await
}

/// The error a writer reports once its lease is gone, from what the database says.
pub(crate) fn lost_error(key: &SessionKey, epoch: u64, current: Option<u64>) -> Error {
    match current {
        Some(current) if current != epoch => Error::Fenced { id: key.id.to_string(), epoch, current },
        Some(_) => Error::OwnershipLost { id: key.id.to_string(), reason: "the writer lease was released".into() },
        None => Error::OwnershipLost { id: key.id.to_string(), reason: "the session was erased".into() },
    }
}

/// A holder's view of its lease, shared by the writer and its renewal task.
#[derive(Debug)]
pub(crate) struct LeaseState {
    deadline: Mutex<Instant>,
    lost: Mutex<Option<Error>>,
    local_deadline: bool,
}

impl LeaseState {
    /// `sent`: when the acquisition was sent.
    pub(crate) fn new(db: &Database, sent: Instant) -> Arc<LeaseState> {
        Arc::new(LeaseState {
            deadline: Mutex::new(deadline_after(db, sent)),
            lost: Mutex::new(None),
            local_deadline: db.options.local_deadline,
        })
    }

    fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn extend(&self, until: Instant) {
        let mut deadline = self.deadline.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        *deadline = (*deadline).max(until);
    }

    pub(crate) fn lose(&self, error: Error) {
        let mut lost = self.lost.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        lost.get_or_insert(error);
    }

    /// `Ok` while this holder may still write; never touches the database.
    pub(crate) fn check(&self, key: &SessionKey) -> Result<()> {
        if let Some(error) = self.lost.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone() {
            return Err(error);
        }
        if self.local_deadline && Instant::now() >= self.deadline() {
            return Err(Error::OwnershipLost {
                id: key.id.to_string(),
                reason: "the writer lease could not be renewed before its local deadline".into(),
            });
        }
        Ok(())
    }

    pub(crate) fn past_deadline(&self) -> bool {
        Instant::now() >= self.deadline()
    }
}

fn deadline_after(db: &Database, sent: Instant) -> Instant {
    sent + db.options.lease_ttl.saturating_sub(db.options.lease_margin)
}

/// Renews the lease until the writer stops it, the lease is lost, or the local
/// deadline passes without a successful renewal.
pub(crate) async fn renew_loop(db: Arc<Database>, key: SessionKey, epoch: u64, state: Arc<LeaseState>) {
    let interval = db.options.renew_interval();
    let mut wait = interval;
    loop {
        tokio::time::sleep(wait).await;
        if state.past_deadline() {
            tracing::warn!(session = %key, epoch, "writer lease deadline passed without renewal; writer stops");
            return;
        }
        let sent = Instant::now();
        match renew(&db, &key, epoch).await {
            Ok(true) => {
                state.extend(deadline_after(&db, sent));
                wait = interval;
            }
            Ok(false) => {
                let current = current_epoch(&db, &key).await.ok().flatten();
                tracing::warn!(session = %key, epoch, ?current, "writer lease was taken over");
                state.lose(lost_error(&key, epoch, current));
                return;
            }
            Err(failure) => {
                let error = failure.into_error("renew lease");
                tracing::warn!(session = %key, epoch, %error, "writer lease renewal failed; retrying");
                wait = interval / 4;
            }
        }
    }
}
