//! The tamper-evident audit log (R-S10): each entry carries the hash of the previous
//! one, `hash = sha256(prev_hash || canonical entry without hash)`.

use berth_core::json::canonical_string;
use berth_core::{Revision, SessionId, TenantId, Timestamp};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The hash the first entry of every tenant chains from.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// An audit record before the catalog assigns its seq and chain hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditDraft {
    pub tenant: TenantId,
    pub time: Timestamp,
    /// `user:<id>`, `service:<id>`, `admin:<id>` or `system:<component>`.
    pub actor: String,
    pub action: String,
    pub session: Option<SessionId>,
    pub revision: Option<Revision>,
    /// `ok`, `denied`, or an error code.
    pub outcome: String,
    /// Free detail (counts, bytes, run ids…).
    pub details: serde_json::Value,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub seq: u64,
    #[serde(flatten)]
    pub draft: AuditDraft,
    pub prev_hash: String,
    pub hash: String,
}

/// Computes the hash of an entry with the given seq and previous hash.
pub fn entry_hash(seq: u64, draft: &AuditDraft, prev_hash: &str) -> String {
    let body = serde_json::json!({
        "seq": seq,
        "tenant": draft.tenant,
        "time": draft.time,
        "actor": draft.actor,
        "action": draft.action,
        "session": draft.session,
        "revision": draft.revision,
        "outcome": draft.outcome,
        "details": draft.details,
    });
    let mut hasher = Sha256::new();
    hasher.update(prev_hash.as_bytes());
    hasher.update(canonical_string(&body).as_bytes());
    hex::encode(hasher.finalize())
}

/// Builds the entry that follows `previous` (or the genesis) in the chain.
pub fn chain(draft: AuditDraft, previous: Option<(u64, &str)>) -> AuditEntry {
    let (seq, prev_hash) = match previous {
        Some((seq, hash)) => (seq + 1, hash.to_owned()),
        None => (0, GENESIS_HASH.to_owned()),
    };
    let hash = entry_hash(seq, &draft, &prev_hash);
    AuditEntry { seq, draft, prev_hash, hash }
}

/// The verdict of `verify`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditVerification {
    pub entries: u64,
    /// `None` when the chain is intact; otherwise the first seq where it breaks.
    pub broken_at: Option<u64>,
    pub reason: Option<String>,
}

/// Verifies a tenant's whole audit log against its head: detects a changed, removed,
/// inserted or reordered entry (anywhere, including at the end).
pub fn verify(entries: &[AuditEntry], head: Option<(u64, String)>) -> AuditVerification {
    let broken = |seq: u64, reason: String| AuditVerification {
        entries: entries.len() as u64,
        broken_at: Some(seq),
        reason: Some(reason),
    };
    let mut prev_hash = GENESIS_HASH.to_owned();
    for (index, entry) in entries.iter().enumerate() {
        let index = index as u64;
        if entry.seq != index {
            return broken(index, format!("expected seq {index}, found {}", entry.seq));
        }
        if entry.prev_hash != prev_hash {
            return broken(index, "previous-hash link does not match".into());
        }
        if entry_hash(entry.seq, &entry.draft, &entry.prev_hash) != entry.hash {
            return broken(index, "entry content does not match its hash".into());
        }
        prev_hash = entry.hash.clone();
    }
    let last = entries.last().map(|entry| (entry.seq, entry.hash.clone()));
    if last != head {
        let at = entries.len() as u64;
        return broken(at, format!("log ends at {last:?} but the head records {head:?}"));
    }
    AuditVerification { entries: entries.len() as u64, broken_at: None, reason: None }
}
