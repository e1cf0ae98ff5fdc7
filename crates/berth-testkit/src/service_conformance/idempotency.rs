//! Caller idempotency (R-S14): an append's `idempotency_key` makes a retry return the
//! original outcome whoever else appended meanwhile, also after the write handle was
//! closed and after a crash that lost the catalog's index; the same key with other
//! content is `IdempotencyKeyReused`; a keyless append is never a duplicate of a keyed
//! batch; racers claiming the same seq with different keys have exactly one winner.

use super::fixtures::*;
use super::ServiceBackend;
use berth_core::limits::IDEMPOTENCY_KEY_BYTES_MAX;
use berth_core::{Error, IdempotencyKey, Timestamp};
use berth_service::{AppendOutcome, AppendRequest, NewEvent, SessionService, IDEMPOTENCY_INDEX_LAG_EVENTS_MAX};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn keyed(key: &str, expected_seq: Option<u64>, events: Vec<NewEvent>) -> AppendRequest {
    AppendRequest {
        memory: Vec::new(),
        run: Some(run("r1")),
        expected_seq,
        events,
        idempotency_key: Some(key.to_owned()),
    }
}

fn keyless(expected_seq: Option<u64>, events: Vec<NewEvent>) -> AppendRequest {
    AppendRequest { memory: Vec::new(), run: Some(run("r1")), expected_seq, events, idempotency_key: None }
}

fn outcome(result: &AppendOutcome) -> (u64, u64, bool) {
    (result.first_seq, result.next_seq, result.duplicate)
}

/// A serial session `id` with run `r1` attached.
async fn session_with_run(service: &SessionService, id: &str) {
    create(service, &owner(), id, serial(DAY_MS, DAY_MS)).await;
    attach(service, &owner(), id, "r1").await;
}

fn claim(target: u64) -> Vec<NewEvent> {
    vec![event("oa/pop", json!({"target": target}))]
}

/// Whether the catalog's index (not the writer's ledger) holds `key` for session `id`.
async fn indexed(service: &SessionService, id: &str, idempotency_key: &str) -> bool {
    let idempotency_key = IdempotencyKey::parse(idempotency_key).expect("a valid key");
    let batch = service.catalog().idempotency_batch(&key(TENANT_A, id), &idempotency_key).await;
    batch.expect("read the idempotency index").is_some()
}

/// A retry with the same key and content returns the original outcome with
/// `duplicate: true` and stores nothing: without `expected_seq`, with the original one,
/// with a wrong one, after later appends by others, after the write handle was closed
/// and reopened (the catalog's index answers), and after a restart.
pub async fn keyed_retry_returns_the_original_outcome(b: &dyn ServiceBackend) {
    let service = b.service();
    session_with_run(&service, "keyed").await;
    let session = sid("keyed");
    let batch = || vec![event("turn/start", json!({"turn": 0})), user_message("once")];
    let first = service.append(&owner(), &session, keyed("k-1", None, batch())).await.unwrap();
    assert_eq!(outcome(&first), (0, 2, false));
    append(&service, &owner(), "keyed", Some("r1"), vec![user_message("someone else")]).await;
    let log = stored_log(&service, TENANT_A, "keyed").await.unwrap();

    b.clock().advance_ms(5);
    for expected_seq in [None, Some(0), Some(3), Some(9)] {
        let retry = service.append(&owner(), &session, keyed("k-1", expected_seq, batch())).await.unwrap();
        assert_eq!(outcome(&retry), (0, 2, true), "retry with expected_seq {expected_seq:?}");
    }
    assert_eq!(stored_log(&service, TENANT_A, "keyed").await.unwrap(), log, "nothing duplicated");

    assert_eq!(service.close_idle_writers(Duration::ZERO).await, 1);
    assert!(indexed(&service, "keyed", "k-1").await, "closing the writer brings the index up to date");
    let reopened = service.append(&owner(), &session, keyed("k-1", None, batch())).await.unwrap();
    assert_eq!(outcome(&reopened), (0, 2, true), "after the write handle was closed and reopened");

    drop(service);
    b.restart().await;
    let service = b.service();
    let restarted = service.append(&owner(), &session, keyed("k-1", Some(0), batch())).await.unwrap();
    assert_eq!(outcome(&restarted), (0, 2, true), "after a restart");
    assert_eq!(stored_log(&service, TENANT_A, "keyed").await.unwrap(), log);
    let next = service.append(&owner(), &session, keyed("k-2", None, batch())).await.unwrap();
    assert_eq!(outcome(&next), (3, 5, false), "a new key appends");
}

/// The same key with other content (data, type, an explicit time, another batch length)
/// is `IdempotencyKeyReused` naming where the key's batch is stored, and stores nothing;
/// also once the catalog's index answers (writer closed) and after a restart. A key
/// is per session: the same key in another session is a new key.
pub async fn key_reused_with_other_content_is_refused(b: &dyn ServiceBackend) {
    let service = b.service();
    session_with_run(&service, "reuse").await;
    session_with_run(&service, "elsewhere").await;
    let session = sid("reuse");
    service.append(&owner(), &session, keyed("k", None, vec![user_message("hi")])).await.unwrap();
    let log = stored_log(&service, TENANT_A, "reuse").await.unwrap();
    let mut timed = user_message("hi");
    timed.time = Some(Timestamp(42));
    let others = [
        vec![user_message("other")],
        vec![event("assistant/message", json!({"content": "hi"}))],
        vec![timed],
        vec![user_message("hi"), user_message("hi")],
    ];
    let reused = Err(Error::IdempotencyKeyReused { key: "k".into(), first_seq: 0 });
    for other in &others {
        assert_eq!(service.append(&owner(), &session, keyed("k", None, other.clone())).await, reused);
        assert_eq!(service.append(&owner(), &session, keyed("k", Some(1), other.clone())).await, reused);
    }
    service.close_idle_writers(Duration::ZERO).await;
    assert_eq!(service.append(&owner(), &session, keyed("k", None, others[0].clone())).await, reused);
    drop(service);
    b.restart().await;
    let service = b.service();
    assert_eq!(service.append(&owner(), &session, keyed("k", None, others[0].clone())).await, reused);
    assert_eq!(stored_log(&service, TENANT_A, "reuse").await.unwrap(), log, "refusals store nothing");
    let elsewhere = service.append(&owner(), &sid("elsewhere"), keyed("k", None, others[0].clone())).await.unwrap();
    assert_eq!(outcome(&elsewhere), (0, 1, false), "keys are per session");
}

/// A keyless append over a keyed batch is never its duplicate, whole or in part
/// (`SeqConflict`), and a new key never adopts events stored by others (keyless or
/// another key): the content rule of R-S7 is for keyless retries of keyless batches.
pub async fn keyless_append_is_never_a_duplicate_of_a_keyed_batch(b: &dyn ServiceBackend) {
    let service = b.service();
    session_with_run(&service, "mixed").await;
    let session = sid("mixed");
    let pair = vec![event("turn/start", json!({"turn": 0})), user_message("claimed")];
    service.append(&owner(), &session, keyed("mine", Some(0), pair.clone())).await.unwrap();
    let conflict = |actual| Err(Error::SeqConflict { expected: 2, actual });
    assert_eq!(service.append(&owner(), &session, keyless(Some(0), pair.clone())).await, conflict(0));
    assert_eq!(service.append(&owner(), &session, keyless(Some(0), pair[..1].to_vec())).await, conflict(0));
    assert_eq!(service.append(&owner(), &session, keyless(Some(1), pair[1..].to_vec())).await, conflict(1));
    assert_eq!(service.append(&owner(), &session, keyed("yours", Some(0), pair.clone())).await, conflict(0));

    append(&service, &owner(), "mixed", Some("r1"), vec![user_message("plain")]).await;
    let plain = service.append(&owner(), &session, keyless(Some(2), vec![user_message("plain")])).await.unwrap();
    assert_eq!(outcome(&plain), (2, 3, true), "keyless retries of keyless batches keep the content rule");
    let adopt = service.append(&owner(), &session, keyed("late", Some(2), vec![user_message("plain")])).await;
    assert_eq!(adopt, Err(Error::SeqConflict { expected: 3, actual: 2 }), "a new key adopts nothing");
    assert_eq!(stored_log(&service, TENANT_A, "mixed").await.unwrap().len(), 3);
}

/// The claim race (dropins §7.1): racers each append the same "claim" event at the
/// same `expected_seq` with their own key; exactly one wins, every other gets
/// `SeqConflict`, and each racer's retry with its own key gives it the same answer.
pub async fn racers_claiming_one_seq_with_their_own_keys_have_one_winner(b: &dyn ServiceBackend) {
    const RACERS: usize = 24;
    let service = b.service();
    session_with_run(&service, "queue").await;
    let mut racers = tokio::task::JoinSet::new();
    for racer in 0..RACERS {
        let service = Arc::clone(&service);
        racers.spawn(async move {
            let request = keyed(&format!("pop-{racer}"), Some(0), claim(7));
            (racer, service.append(&owner(), &sid("queue"), request).await)
        });
    }
    let mut winners = Vec::new();
    while let Some(joined) = racers.join_next().await {
        let (racer, result) = joined.expect("a racer task");
        match result {
            Ok(won) => {
                assert_eq!(outcome(&won), (0, 1, false));
                winners.push(racer);
            }
            Err(error) => assert_eq!(error, Error::SeqConflict { expected: 1, actual: 0 }, "racer {racer}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one claim wins, not {winners:?}");
    for racer in 0..RACERS {
        let retry = service.append(&owner(), &sid("queue"), keyed(&format!("pop-{racer}"), Some(0), claim(7))).await;
        match retry {
            Ok(again) if racer == winners[0] => assert_eq!(outcome(&again), (0, 1, true)),
            other => assert_eq!(other, Err(Error::SeqConflict { expected: 1, actual: 0 }), "racer {racer}'s retry"),
        }
    }
    assert_eq!(stored_log(&service, TENANT_A, "queue").await.unwrap().len(), 1);
}

/// The crash window: the events of a keyed append are durable but the catalog's index
/// never heard of the key (it is written later, and the crash lost it). The key lives
/// in the log, so after the restart the retry is still recognised — and its content
/// still checked.
pub async fn a_key_whose_index_write_was_lost_is_still_recognised(b: &dyn ServiceBackend) {
    let service = b.service();
    session_with_run(&service, "window").await;
    let session = sid("window");
    let first = service.append(&owner(), &session, keyed("k", None, claim(1))).await.unwrap();
    append(&service, &owner(), "window", Some("r1"), vec![user_message("later")]).await;
    assert!(!indexed(&service, "window", "k").await, "the index write is still pending when the crash comes");
    drop(service);
    b.restart().await;
    let service = b.service();
    assert!(!indexed(&service, "window", "k").await, "the crash lost the index write");
    let retry = service.append(&owner(), &session, keyed("k", None, claim(1))).await.unwrap();
    assert_eq!(outcome(&retry), outcome(&AppendOutcome { duplicate: true, ..first }));
    let reused = service.append(&owner(), &session, keyed("k", None, claim(2))).await;
    assert_eq!(reused, Err(Error::IdempotencyKeyReused { key: "k".into(), first_seq: 0 }));
    assert_eq!(stored_log(&service, TENANT_A, "window").await.unwrap().len(), 2);
}

/// Keys are honoured for the session's life, not only while it takes appends: once it
/// is closed (or the run detached), a keyed retry of a stored batch still gets its
/// original outcome — also when the crash that preceded the close lost the index write,
/// so the key is only in the log — the key with other content is still
/// `IdempotencyKeyReused`, and a new key gets the refusal (`Terminal`).
pub async fn a_keyed_retry_after_the_session_closed_gets_its_original_outcome(b: &dyn ServiceBackend) {
    let service = b.service();
    session_with_run(&service, "finished").await;
    let session = sid("finished");
    service.append(&owner(), &session, keyed("early", None, claim(1))).await.unwrap();
    service.close_idle_writers(Duration::ZERO).await;
    let last = service.append(&owner(), &session, keyed("last", None, claim(2))).await.unwrap();
    drop(service);
    b.restart().await;
    let service = b.service();
    assert!(!indexed(&service, "finished", "last").await, "the crash lost the index write of the last batch");
    service.detach(&owner(), &session, &run("r1"), "completed", None).await.unwrap();
    service.close(&owner(), &session, berth_service::ClosePolicy::Refuse, None).await.unwrap();

    let retry = service.append(&owner(), &session, keyed("last", None, claim(2))).await.unwrap();
    assert_eq!(outcome(&retry), (last.first_seq, last.next_seq, true), "found in the log after the close");
    let early = service.append(&owner(), &session, keyed("early", Some(0), claim(1))).await.unwrap();
    assert_eq!(outcome(&early), (0, 1, true), "found in the catalog's index after the close");
    let reused = service.append(&owner(), &session, keyed("last", None, claim(3))).await;
    assert_eq!(reused, Err(Error::IdempotencyKeyReused { key: "last".into(), first_seq: 1 }));
    let fresh = service.append(&owner(), &session, keyed("new", None, claim(3))).await;
    assert!(matches!(fresh, Err(Error::Terminal { .. })), "{fresh:?}");
}

/// The catalog's index never falls further behind the log than
/// `IDEMPOTENCY_INDEX_LAG_EVENTS_MAX` plus one batch, keyed or not, so the read a new
/// writer does to find unindexed keys is bounded, never the whole log; and the writer
/// that indexed a key still answers its retry.
pub async fn the_index_lags_the_log_by_a_bounded_number_of_events(b: &dyn ServiceBackend) {
    let service = b.service();
    session_with_run(&service, "long").await;
    let session = sid("long");
    let batch_events = 10;
    for batch in 0..(IDEMPOTENCY_INDEX_LAG_EVENTS_MAX * 3 / batch_events) {
        let events: Vec<NewEvent> = (0..batch_events).map(|i| user_message(&format!("{batch}.{i}"))).collect();
        let request = if batch % 7 == 0 { keyed(&format!("b{batch}"), None, events) } else { keyless(None, events) };
        let appended = service.append(&owner(), &session, request).await.unwrap();
        let indexed_until = service.catalog().idempotency_indexed_until(&key(TENANT_A, "long")).await.unwrap();
        let lag = appended.next_seq - indexed_until.expect("an index exists once a writer opened");
        assert!(lag < IDEMPOTENCY_INDEX_LAG_EVENTS_MAX + batch_events, "the index lags {lag} events");
    }
    assert!(indexed(&service, "long", "b0").await, "keyed batches reach the index as it catches up");
    // The same writer is still open: the keys its ledger handed to the index are known
    // to it still (a fresh key skips the index only when no indexed key could match).
    let batch0: Vec<NewEvent> = (0..batch_events).map(|i| user_message(&format!("0.{i}"))).collect();
    let retry = service.append(&owner(), &session, keyed("b0", None, batch0)).await.unwrap();
    assert_eq!(outcome(&retry), (0, batch_events, true), "a retry of a batch the open writer indexed");
}

/// Keys are the session's: a fork (a new session) starts without them (its copied
/// events lose their marks), an export carries them and an import honours them, and a
/// deleted session's keys go with it.
pub async fn keys_stay_with_their_session_across_fork_export_import_and_delete(b: &dyn ServiceBackend) {
    let service = b.service();
    session_with_run(&service, "origin").await;
    let session = sid("origin");
    service.append(&owner(), &session, keyed("k", None, claim(1))).await.unwrap();
    let fork = service.fork(&owner(), &session, None, Some(sid("branch"))).await.unwrap();
    assert!(stored_log(&service, TENANT_A, "branch").await.unwrap().iter().all(|event| event.idempotency.is_none()));
    attach(&service, &owner(), "branch", "r1").await;
    let in_fork = service.append(&owner(), &fork.header.id, keyed("k", None, claim(1))).await.unwrap();
    assert!(!in_fork.duplicate, "a fork has its own keys");

    let exported = service.export(&owner(), &session).await.unwrap();
    service.delete(&owner(), &session, None).await.unwrap();
    service.import(&admin(TENANT_A), &exported).await.unwrap();
    let imported = service.append(&owner(), &session, keyed("k", None, claim(1))).await.unwrap();
    assert_eq!(outcome(&imported), (0, 1, true), "an imported log keeps its keys");

    service.delete(&owner(), &session, None).await.unwrap();
    session_with_run(&service, "origin").await;
    let recreated = service.append(&owner(), &session, keyed("k", None, claim(2))).await.unwrap();
    assert_eq!(outcome(&recreated), (0, 1, false), "a deleted session's keys went with it");
    service.close_idle_writers(Duration::ZERO).await;
    let retried = service.append(&owner(), &session, keyed("k", None, claim(2))).await.unwrap();
    assert_eq!(outcome(&retried), (0, 1, true), "the index holds the new session's batch, not the old one's");
}

/// Keys are checked before anything is stored: 1 to `IDEMPOTENCY_KEY_BYTES_MAX` bytes
/// of `[A-Za-z0-9-_.:+/=]`; an empty batch stores nothing, so its (well-formed) key is not
/// used up: the same key then carries a real batch.
pub async fn malformed_keys_and_empty_keyed_batches_are_refused(b: &dyn ServiceBackend) {
    let service = b.service();
    session_with_run(&service, "strict").await;
    let session = sid("strict");
    for bad in ["", "a b", "é", "k\n"] {
        let refused = service.append(&owner(), &session, keyed(bad, None, claim(1))).await;
        assert!(matches!(refused, Err(Error::Invalid { .. })), "{bad:?}: {refused:?}");
    }
    let long = "k".repeat(IDEMPOTENCY_KEY_BYTES_MAX + 1);
    let refused = service.append(&owner(), &session, keyed(&long, None, claim(1))).await;
    assert!(matches!(refused, Err(Error::LimitExceeded { .. })), "{refused:?}");
    let empty = service.append(&owner(), &session, keyed("k", None, Vec::new())).await.unwrap();
    assert_eq!(outcome(&empty), (0, 0, false), "an empty keyed batch is a no-op");
    assert!(stored_log(&service, TENANT_A, "strict").await.unwrap().is_empty());
    let empty_bad = service.append(&owner(), &session, keyed("a b", None, Vec::new())).await;
    assert!(matches!(empty_bad, Err(Error::Invalid { .. })), "the key is still checked: {empty_bad:?}");
    assert!(!service.append(&owner(), &session, keyed("k", None, claim(1))).await.unwrap().duplicate);
    let longest = "k".repeat(IDEMPOTENCY_KEY_BYTES_MAX);
    assert!(!service.append(&owner(), &session, keyed(&longest, None, claim(1))).await.unwrap().duplicate);
}
