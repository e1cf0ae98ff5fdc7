//! The checker on histories whose verdict is known: each bad one is a way a store can
//! break linearizability, each good one an overlap or unknown outcome it must allow.

use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn entry(client: usize, invoked_ns: u64, returned_ns: u64, operation: Operation, outcome: Outcome) -> Entry {
    Entry { client, invoked_ns, returned_ns: Some(returned_ns), operation, outcome: Some(outcome) }
}

fn unknown(client: usize, invoked_ns: u64, operation: Operation) -> Entry {
    Entry { client, invoked_ns, returned_ns: None, operation, outcome: None }
}

fn append(events: &[Label]) -> Operation {
    Operation::Append { events: events.to_vec(), expected_seq: None, key: None, run: None }
}

fn append_at(events: &[Label], expected_seq: u64) -> Operation {
    Operation::Append { events: events.to_vec(), expected_seq: Some(expected_seq), key: None, run: None }
}

fn keyed(events: &[Label], key: &str) -> Operation {
    Operation::Append { events: events.to_vec(), expected_seq: None, key: Some(key.into()), run: None }
}

fn appended(first_seq: u64, next_seq: u64) -> Outcome {
    Outcome::Appended { first_seq, next_seq, duplicate: false }
}

fn duplicate(first_seq: u64, next_seq: u64) -> Outcome {
    Outcome::Appended { first_seq, next_seq, duplicate: true }
}

fn read(from: u64) -> Operation {
    Operation::Read { from, limit: 100 }
}

fn events(labels: &[Label]) -> Outcome {
    Outcome::Events(labels.to_vec())
}

fn attach(run: &str) -> Operation {
    Operation::Attach { run: run.into() }
}

fn detach(run: &str) -> Operation {
    Operation::Detach { run: run.into() }
}

fn verdict(entries: Vec<Entry>) -> Result<Linearization, CheckError> {
    check(&History::new(entries).expect("well formed"))
}

fn assert_linearizable(entries: Vec<Entry>) -> Linearization {
    verdict(entries).unwrap_or_else(|error| panic!("{error}"))
}

fn assert_not_linearizable(entries: Vec<Entry>) {
    match verdict(entries) {
        Err(CheckError::NotLinearizable { .. }) => {}
        other => panic!("expected a violation, got {other:?}"),
    }
}

// Known-bad histories.

#[test]
fn a_read_that_misses_an_append_acknowledged_before_it_started_is_rejected() {
    assert_not_linearizable(vec![
        entry(0, 0, 10, append(&[1]), appended(0, 1)),
        entry(1, 20, 30, read(0), events(&[])),
    ]);
}

#[test]
fn two_appends_acknowledged_at_the_same_seq_are_rejected() {
    assert_not_linearizable(vec![
        entry(0, 0, 10, append(&[1]), appended(0, 1)),
        entry(1, 5, 15, append(&[2]), appended(0, 1)),
    ]);
}

#[test]
fn a_duplicate_idempotency_key_that_yields_new_seqs_is_rejected() {
    let first = entry(0, 0, 10, keyed(&[1], "k"), appended(0, 1));
    // Stored again, past the first batch.
    assert_not_linearizable(vec![first.clone(), entry(1, 20, 30, keyed(&[1], "k"), appended(1, 2))]);
    // Claimed a duplicate but at other seqs.
    assert_not_linearizable(vec![first.clone(), entry(1, 20, 30, keyed(&[1], "k"), duplicate(1, 2))]);
    // The right answer.
    assert_linearizable(vec![first, entry(1, 20, 30, keyed(&[1], "k"), duplicate(0, 1))]);
}

#[test]
fn a_stale_read_after_a_newer_read_is_rejected() {
    // The append is concurrent with both reads, but once a read has seen it, a read that
    // starts later must see it too.
    assert_not_linearizable(vec![
        entry(0, 0, 100, append(&[1]), appended(0, 1)),
        entry(1, 10, 20, read(0), events(&[1])),
        entry(2, 30, 40, read(0), events(&[])),
    ]);
    // Either read alone is fine.
    assert_linearizable(vec![entry(0, 0, 100, append(&[1]), appended(0, 1)), entry(2, 30, 40, read(0), events(&[]))]);
}

#[test]
fn a_read_of_events_in_another_order_than_their_seqs_is_rejected() {
    assert_not_linearizable(vec![
        entry(0, 0, 10, append(&[1]), appended(0, 1)),
        entry(0, 20, 30, append(&[2]), appended(1, 2)),
        entry(1, 40, 50, read(0), events(&[2, 1])),
    ]);
}

#[test]
fn a_torn_batch_is_rejected() {
    // All or nothing: half a batch is never readable.
    assert_not_linearizable(vec![
        entry(0, 0, 100, append(&[1, 2, 3]), appended(0, 3)),
        entry(1, 10, 20, read(0), events(&[1, 2])),
    ]);
}

#[test]
fn an_unknown_append_that_took_effect_twice_is_rejected() {
    assert_not_linearizable(vec![unknown(0, 0, append(&[1])), entry(1, 50, 60, read(0), events(&[1, 1]))]);
}

#[test]
fn a_seq_conflict_reporting_the_wrong_end_is_rejected() {
    assert_not_linearizable(vec![
        entry(0, 0, 10, append(&[1]), appended(0, 1)),
        entry(1, 20, 30, append_at(&[2], 0), Outcome::SeqConflict { next_seq: 0 }),
    ]);
    assert_linearizable(vec![
        entry(0, 0, 10, append(&[1]), appended(0, 1)),
        entry(1, 20, 30, append_at(&[2], 0), Outcome::SeqConflict { next_seq: 1 }),
    ]);
}

#[test]
fn two_runs_attached_to_a_serial_session_at_once_are_rejected() {
    assert_not_linearizable(vec![
        entry(0, 0, 10, attach("a"), Outcome::Attached),
        entry(1, 20, 30, attach("b"), Outcome::Attached),
    ]);
    // A busy answer after the detach finished is stale.
    assert_not_linearizable(vec![
        entry(0, 0, 10, attach("a"), Outcome::Attached),
        entry(0, 20, 30, detach("a"), Outcome::Detached),
        entry(1, 40, 50, attach("b"), Outcome::Busy),
    ]);
}

#[test]
fn a_tail_that_skips_an_event_is_rejected() {
    assert_not_linearizable(vec![
        entry(0, 0, 10, append(&[1]), appended(0, 1)),
        entry(0, 20, 30, append(&[2]), appended(1, 2)),
        entry(1, 0, 50, Operation::Tail { from: 0 }, events(&[2])),
    ]);
}

// Known-good histories.

#[test]
fn overlapping_appends_may_take_effect_in_either_order() {
    for (first, second, log) in [(appended(0, 1), appended(1, 2), [1, 2]), (appended(1, 2), appended(0, 1), [2, 1])] {
        let found = assert_linearizable(vec![
            entry(0, 0, 10, append(&[1]), first),
            entry(1, 5, 15, append(&[2]), second),
            entry(2, 20, 30, read(0), events(&log)),
        ]);
        assert_eq!(found.order.len(), 3);
    }
}

#[test]
fn a_read_overlapping_an_append_may_or_may_not_see_it() {
    for seen in [&[][..], &[1][..]] {
        assert_linearizable(vec![
            entry(0, 0, 100, append(&[1]), appended(0, 1)),
            entry(1, 10, 20, read(0), events(seen)),
        ]);
    }
}

#[test]
fn an_unknown_append_may_take_effect_or_not() {
    for seen in [&[][..], &[1][..]] {
        assert_linearizable(vec![unknown(0, 0, append(&[1])), entry(1, 50, 60, read(0), events(seen))]);
    }
    // Late: after a read that did not see it.
    assert_linearizable(vec![
        unknown(0, 0, append(&[1])),
        entry(1, 10, 20, read(0), events(&[])),
        entry(1, 30, 40, read(0), events(&[1])),
    ]);
    // But not before its invocation.
    assert_not_linearizable(vec![entry(1, 10, 20, read(0), events(&[1])), unknown(0, 30, append(&[1]))]);
}

#[test]
fn a_keyed_retry_after_an_unknown_outcome_answers_the_first_batch_or_stores_it() {
    // The first attempt took effect: the retry is a duplicate.
    assert_linearizable(vec![
        unknown(0, 0, keyed(&[1, 2], "k")),
        entry(0, 50, 60, keyed(&[1, 2], "k"), duplicate(0, 2)),
        entry(1, 70, 80, read(0), events(&[1, 2])),
    ]);
    // It did not: the retry stores it.
    assert_linearizable(vec![
        unknown(0, 0, keyed(&[1, 2], "k")),
        entry(0, 50, 60, keyed(&[1, 2], "k"), appended(0, 2)),
        entry(1, 70, 80, read(0), events(&[1, 2])),
    ]);
    // Never both.
    assert_not_linearizable(vec![
        unknown(0, 0, keyed(&[1, 2], "k")),
        entry(0, 50, 60, keyed(&[1, 2], "k"), appended(0, 2)),
        entry(1, 70, 80, read(0), events(&[1, 2, 1, 2])),
    ]);
}

#[test]
fn a_keyless_retry_at_its_expected_seq_is_a_duplicate_by_content() {
    assert_linearizable(vec![unknown(0, 0, append_at(&[1], 0)), entry(0, 50, 60, append_at(&[1], 0), duplicate(0, 1))]);
    // Not of a keyed batch with the same events.
    assert_not_linearizable(vec![
        entry(0, 0, 10, keyed(&[1], "k"), appended(0, 1)),
        entry(0, 20, 30, append_at(&[1], 0), duplicate(0, 1)),
    ]);
}

#[test]
fn a_key_with_other_content_is_refused_with_the_stored_seq() {
    assert_linearizable(vec![
        entry(0, 0, 10, append(&[7]), appended(0, 1)),
        entry(0, 20, 30, keyed(&[1], "k"), appended(1, 2)),
        entry(1, 40, 50, keyed(&[2], "k"), Outcome::KeyReused { first_seq: 1 }),
    ]);
}

#[test]
fn runs_attach_busy_and_detach_in_real_time_order() {
    assert_linearizable(vec![
        entry(0, 0, 10, attach("a"), Outcome::Attached),
        entry(1, 20, 30, attach("b"), Outcome::Busy),
        entry(0, 40, 50, detach("a"), Outcome::Detached),
        entry(1, 60, 70, attach("b"), Outcome::Attached),
        entry(0, 80, 90, detach("a"), Outcome::RunNotAttached),
        unknown(1, 100, attach("c")),
        entry(1, 110, 120, attach("b"), Outcome::RunExists),
    ]);
}

fn append_as(events: &[Label], run: &str) -> Operation {
    Operation::Append { events: events.to_vec(), expected_seq: None, key: None, run: Some(run.into()) }
}

#[test]
fn an_append_by_a_run_detached_before_it_started_is_refused() {
    let attached_then_detached =
        vec![entry(0, 0, 10, attach("a"), Outcome::Attached), entry(0, 20, 30, detach("a"), Outcome::Detached)];
    let mut stored = attached_then_detached.clone();
    stored.push(entry(1, 40, 50, append_as(&[1], "a"), appended(0, 1)));
    assert_not_linearizable(stored);
    let mut refused = attached_then_detached.clone();
    refused.push(entry(1, 40, 50, append_as(&[1], "a"), Outcome::RunNotAttached));
    assert_linearizable(refused);
    // Concurrent with the detach it may land first, but then a read after the detach
    // sees it.
    let racing = vec![
        entry(0, 0, 10, attach("a"), Outcome::Attached),
        entry(1, 15, 60, append_as(&[1], "a"), appended(0, 1)),
        entry(0, 20, 30, detach("a"), Outcome::Detached),
    ];
    assert_linearizable(racing.clone());
    let mut unseen = racing;
    unseen.push(entry(2, 40, 50, read(0), events(&[])));
    assert_not_linearizable(unseen);
}

#[test]
fn a_stored_key_answers_its_batch_after_the_run_is_gone() {
    assert_linearizable(vec![
        entry(0, 0, 10, attach("a"), Outcome::Attached),
        entry(
            0,
            20,
            30,
            Operation::Append { events: vec![1], expected_seq: None, key: Some("k".into()), run: Some("a".into()) },
            appended(0, 1),
        ),
        entry(0, 40, 50, detach("a"), Outcome::Detached),
        entry(
            0,
            60,
            70,
            Operation::Append { events: vec![1], expected_seq: None, key: Some("k".into()), run: Some("a".into()) },
            duplicate(0, 1),
        ),
    ]);
}

#[test]
fn a_busy_append_takes_no_effect() {
    assert_linearizable(vec![entry(0, 0, 10, append(&[1]), Outcome::Busy), entry(1, 20, 30, read(0), events(&[]))]);
}

#[test]
fn a_tail_receives_a_prefix_of_what_is_appended_meanwhile() {
    assert_linearizable(vec![
        entry(2, 0, 100, Operation::Tail { from: 1 }, events(&[2])),
        entry(0, 10, 20, append(&[1]), appended(0, 1)),
        entry(0, 30, 40, append(&[2, 3]), appended(1, 3)),
    ]);
}

// Malformed histories are refused with a typed error.

#[test]
fn malformed_histories_are_refused() {
    let good = entry(0, 10, 20, read(0), events(&[]));
    let returned_early = Entry { returned_ns: Some(5), ..good.clone() };
    assert_eq!(History::new(vec![returned_early]), Err(HistoryError::ReturnBeforeInvoke { entry: 0 }));
    let no_outcome = Entry { outcome: None, ..good.clone() };
    assert_eq!(History::new(vec![no_outcome]), Err(HistoryError::OutcomeWithoutReturn { entry: 0 }));
    let misfit = Entry { outcome: Some(Outcome::Attached), ..good.clone() };
    assert_eq!(History::new(vec![misfit]), Err(HistoryError::OutcomeDoesNotFit { entry: 0 }));
    let empty = entry(0, 0, 1, append(&[]), appended(0, 0));
    assert_eq!(History::new(vec![empty]), Err(HistoryError::EmptyAppend { entry: 0 }));
    let overlapping = entry(0, 15, 30, read(0), events(&[]));
    assert_eq!(
        History::new(vec![good.clone(), overlapping]),
        Err(HistoryError::ClientOverlaps { client: 0, entry: 1 })
    );
    assert!(History::new(vec![good]).is_ok());
}

#[test]
fn a_search_over_its_budget_is_inconclusive_not_accepted() {
    let entries: Vec<Entry> =
        (0..8).map(|client| entry(client, 0, 100, append(&[client as u64]), Outcome::Busy)).collect();
    let history = History::new(entries).unwrap();
    assert!(matches!(check_from(&history, SessionModel::default(), 3), Err(CheckError::Inconclusive { .. })));
}

/// Histories made by running the model one operation at a time, each operation's
/// interval drawn around its point: linearizable by construction. Four clients with up
/// to four operations in flight, unknown outcomes among them.
fn generated_history(seed: u64, operations: usize) -> (Vec<Entry>, Vec<Label>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = SessionModel::default();
    let mut entries = Vec::new();
    let mut client_free_at = vec![0u64; 4 + operations];
    let mut label = 0;
    for step in 0..operations {
        let point = 1_000 * (step as u64 + 1);
        // A client that is free by the operation's point (else one of its own), so the
        // interval always holds the point.
        let free: Vec<usize> = (0..4).filter(|&client| client_free_at[client] <= point).collect();
        let client = if free.is_empty() { 4 + step } else { free[rng.gen_range(0..free.len())] };
        let operation = match rng.gen_range(0..10) {
            0..=3 => {
                let events: Vec<Label> = (0..rng.gen_range(1..4))
                    .map(|_| {
                        label += 1;
                        label
                    })
                    .collect();
                let expected_seq = rng
                    .gen_bool(0.3)
                    .then(|| model.log().len() as u64 - rng.gen_range(0..2).min(model.log().len() as u64));
                let key = rng.gen_bool(0.4).then(|| format!("k{}", rng.gen_range(0..operations)));
                let run = rng.gen_bool(0.3).then(|| format!("r{}", rng.gen_range(0..3)));
                Operation::Append { events, expected_seq, key, run }
            }
            4..=5 => Operation::Read { from: rng.gen_range(0..=model.log().len() as u64), limit: rng.gen_range(1..10) },
            6 => Operation::Tail { from: rng.gen_range(0..=model.log().len() as u64) },
            7..=8 => Operation::Attach { run: format!("r{}", rng.gen_range(0..3)) },
            _ => Operation::Detach { run: format!("r{}", rng.gen_range(0..3)) },
        };
        let mut outcome = model.apply(&operation);
        if let (Operation::Tail { .. }, Outcome::Events(received)) = (&operation, &mut outcome) {
            received.truncate(rng.gen_range(0..=received.len()));
        }
        let invoked_ns = point.saturating_sub(rng.gen_range(0..3_500)).max(client_free_at[client]);
        let is_unknown = rng.gen_bool(0.05);
        if is_unknown {
            entries.push(unknown(client, invoked_ns, operation));
            continue;
        }
        let returned_ns = point + rng.gen_range(0..3_500);
        client_free_at[client] = returned_ns + 1;
        entries.push(entry(client, invoked_ns, returned_ns, operation, outcome));
    }
    (entries, model.log().to_vec())
}

#[test]
fn generated_linearizable_histories_are_accepted() {
    for seed in 0..64 {
        let (entries, _) = generated_history(seed, 120);
        let history = History::new(entries).unwrap_or_else(|error| panic!("seed {seed}: {error}"));
        if let Err(error) = check(&history) {
            panic!("seed {seed}: {error}");
        }
    }
}

#[test]
fn generated_histories_with_a_corrupted_read_are_rejected() {
    let mut rejected = 0;
    // Shorter than the accepted ones: a rejection visits every state the search can reach.
    for seed in 0..32 {
        let (mut entries, log) = generated_history(seed, 80);
        // A final read of everything, after everything, then one event of it lost.
        let end = entries.iter().filter_map(|entry| entry.returned_ns).max().unwrap_or(0) + 1;
        entries.push(entry(9, end, end + 1, read(0), events(&log)));
        assert!(check(&History::new(entries.clone()).unwrap()).is_ok(), "seed {seed}");
        if log.len() < 2 {
            continue;
        }
        let mut corrupted = log.clone();
        corrupted.remove(log.len() / 2);
        entries.last_mut().unwrap().outcome = Some(events(&corrupted));
        assert!(check(&History::new(entries).unwrap()).is_err(), "seed {seed}: a lost event was accepted");
        rejected += 1;
    }
    assert!(rejected > 25, "only {rejected} histories had two events");
}
