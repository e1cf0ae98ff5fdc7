//! Resume clauses (R-S6, R-C5): a crash (`restart`: the instance is dropped without
//! shutdown) leaves an open turn; resume attaches first, then appends the closers once,
//! and returns the latest checkpoint.

use super::fixtures::*;
use super::ServiceBackend;
use berth_catalog::{RepairNote, ResumeMark, RunAt, RunStatus};
use berth_core::repair::{
    interrupted_turn_closers, mark_repaired_by, REPAIRED_BY, TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN,
};
use berth_core::{Clock, Event, Revision};
use berth_service::{NewEvent, OnBusy, ResumeOutcome, SessionService};
use serde_json::{json, Value};

const RUN_LEASE_TTL_MS: u64 = 5_000;

fn call(call_id: &str, name: &str) -> Value {
    json!({"call_id": call_id, "name": name, "arguments": {"path": call_id}})
}

/// An open turn: a completed tool call, one requested but never started, one started
/// (`tool/call` recorded) without a result; an open step; two checkpoints.
fn open_turn_with_pending_calls() -> Vec<NewEvent> {
    vec![
        event("turn/start", json!({"turn": 0})),
        user_message("refactor the parser"),
        event("checkpoint", json!({"state": {"phase": "planning"}})),
        event("step/start", json!({"turn": 0, "step": 0})),
        event(
            "assistant/message",
            json!({"content": "running tools", "tool_calls": [
                call("c-done", "read_file"), call("c-unstarted", "grep"), call("c-started", "write_file")
            ]}),
        ),
        event("tool/call", call("c-done", "read_file")),
        event("tool/result", json!({"call_id": "c-done", "content": "fn parse() {}"})),
        event("tool/call", call("c-started", "write_file")),
        event("checkpoint", json!({"state": {"phase": "tools", "done": ["c-done"]}})),
    ]
}

/// Checks one closer: its seq, run, time, type and the fields R-C5 fixes.
fn check_closer(closer: &Event, seq: u64, run_id: &str, time_of: &Event, event_type: &str, fields: Value) {
    assert_eq!(closer.seq.get(), seq, "{closer:?}");
    assert_eq!(closer.run, Some(run(run_id)), "{closer:?}");
    assert_eq!(closer.time, time_of.time, "closers take the last real event's time");
    assert_eq!(closer.event_type.as_str(), event_type, "{closer:?}");
    let data = data(closer);
    for (field, value) in fields.as_object().expect("fields") {
        assert_eq!(&data[field], value, "{field} of {closer:?}");
    }
}

fn tool_error(call_id: &str, code: &str, name: &str) -> Value {
    json!({"call_id": call_id, "is_error": true, "error": {"code": code, "name": name}, "turn": 0})
}

async fn resume(service: &SessionService, id: &str, run_id: &str, on_busy: OnBusy) -> ResumeOutcome {
    service
        .resume(&owner(), &sid(id), attach_request(run_id, on_busy))
        .await
        .unwrap_or_else(|error| panic!("resume {id} with {run_id}: {error}"))
}

/// Resuming again (after another crash, too) finds nothing open: no closers, the same
/// checkpoint, the log unchanged.
async fn resume_again_repairs_nothing(b: &dyn ServiceBackend, id: &str, log: &[Event], checkpoint: Option<&Event>) {
    for (attempt, run_id) in ["r-again", "r-after-restart"].into_iter().enumerate() {
        if attempt == 1 {
            b.restart().await;
        }
        let service = b.service();
        let outcome = resume(&service, id, run_id, OnBusy::Interrupt).await;
        assert_eq!(outcome.repaired, Vec::<Event>::new(), "{run_id}: nothing left to repair");
        assert_eq!(outcome.checkpoint.as_ref(), checkpoint);
        assert_eq!(outcome.next_seq, log.len() as u64);
        assert_eq!(stored_log(&service, TENANT_A, id).await.as_deref(), Some(log));
    }
}

/// R-S6 + R-C5: crash mid-turn, restart, and resume once the crashed run's lease has
/// lapsed. Resume attaches first (the crashed run is abandoned), then appends exactly
/// TOOL_NOT_STARTED for the call never started, TOOL_OUTCOME_UNKNOWN for the call
/// started without a result, `step/end`, `turn/end {interrupted}` — seqs continuing the
/// log, carrying the crashed run — and returns the latest checkpoint. Before the lease
/// lapses resume is `Busy` and appends nothing; resuming again appends nothing.
pub async fn crash_with_pending_tool_calls_then_resume_appends_closers_once(b: &dyn ServiceBackend) {
    let service = b.service();
    create(&service, &owner(), "crashy", serial(DAY_MS, RUN_LEASE_TTL_MS)).await;
    attach(&service, &owner(), "crashy", "r1").await;
    append(&service, &owner(), "crashy", Some("r1"), open_turn_with_pending_calls()).await;
    let before = stored_log(&service, TENANT_A, "crashy").await.unwrap();
    assert_eq!(before.len(), 9);
    drop(service);
    b.restart().await;

    let service = b.service();
    let busy = service.resume(&owner(), &sid("crashy"), attach_request("r2", OnBusy::Reject)).await;
    assert_eq!(label(&busy), "busy", "the crashed run's lease is still live");
    assert_eq!(stored_log(&service, TENANT_A, "crashy").await.unwrap(), before);

    b.clock().advance_ms(RUN_LEASE_TTL_MS + 1);
    let outcome = resume(&service, "crashy", "r2", OnBusy::Reject).await;
    assert_eq!(outcome.attachment.run.run_id, run("r2"));
    assert_eq!(outcome.attachment.displaced.len(), 1);
    assert_eq!(outcome.attachment.displaced[0].run_id, run("r1"));
    assert_eq!(outcome.attachment.displaced[0].status, RunStatus::Abandoned);
    let closers = &outcome.repaired;
    assert_eq!(closers.len(), 4, "{closers:#?}");
    let last = &before[8];
    check_closer(
        &closers[0],
        9,
        "r1",
        last,
        "tool/result",
        tool_error("c-unstarted", TOOL_NOT_STARTED, "ToolNotStartedError"),
    );
    let mut unknown = tool_error("c-started", TOOL_OUTCOME_UNKNOWN, "ToolOutcomeUnknownError");
    unknown["call_seq"] = json!(7);
    check_closer(&closers[1], 10, "r1", last, "tool/result", unknown);
    check_closer(&closers[2], 11, "r1", last, "step/end", json!({"turn": 0, "step": 0}));
    check_closer(&closers[3], 12, "r1", last, "turn/end", json!({"turn": 0, "reason": "interrupted"}));
    // The R-C5 closers, nothing else, marked with who repaired them and when (the
    // crashed run stays their `run`, its last event's time their `time`).
    let mut expected = interrupted_turn_closers(&before).unwrap();
    mark_repaired_by(&mut expected, &run("r2"), b.clock().now());
    assert_eq!(closers, &expected, "the R-C5 closers, marked repaired_by r2 now");
    assert!(closers.iter().all(|closer| data(closer)[REPAIRED_BY] == json!({"run": "r2", "at": b.clock().now().0})));
    assert_eq!(outcome.checkpoint.as_ref(), Some(&before[8]), "the latest checkpoint");
    assert_eq!(outcome.next_seq, 13);

    let after = stored_log(&service, TENANT_A, "crashy").await.unwrap();
    assert_eq!(after[..9], before[..]);
    assert_eq!(after[9..], closers[..], "appended once, as returned");
    let record = stored(&service, TENANT_A, "crashy").await.unwrap();
    assert_eq!(record.event_count, 13);
    // The record notes it (`RepairNote`): r1 left the turn open at its last event's
    // time, r2 repaired it now.
    let note = RepairNote {
        interrupted: Some(RunAt { run: run("r1"), at: last.time }),
        repaired_by: Some(RunAt { run: run("r2"), at: b.clock().now() }),
    };
    assert_eq!(record.repair, note);
    assert!(record.repair.is_repaired());
    let attach_entry = audited(&service, TENANT_A, "attach").await.pop().unwrap();
    let repair_entry = audited(&service, TENANT_A, "repair").await;
    assert_eq!(repair_entry.len(), 1);
    assert!(attach_entry.seq < repair_entry[0].seq, "a legal attachment first, then the repair");
    assert_eq!(repair_entry[0].draft.details["closers"], 4);
    assert_eq!(repair_entry[0].draft.details["first_seq"], 9);
    drop(service);

    resume_again_repairs_nothing(b, "crashy", &after, Some(&before[8])).await;
    let service = b.service();
    let kept = stored(&service, TENANT_A, "crashy").await.unwrap().repair;
    assert_eq!(kept, note, "a resume that repairs nothing leaves the note as it was");
}

/// R-S6 with `on_busy = interrupt` right after the crash (no waiting for the lease):
/// calls requested but never started (no `tool/call` records) are closed with
/// TOOL_NOT_STARTED; there is no checkpoint to return.
pub async fn crash_then_resume_with_interrupt_closes_calls_never_started(b: &dyn ServiceBackend) {
    let service = b.service();
    create(&service, &owner(), "requested", serial(DAY_MS, RUN_LEASE_TTL_MS)).await;
    attach(&service, &owner(), "requested", "r1").await;
    let events = vec![
        event("turn/start", json!({"turn": 3})),
        user_message("search twice"),
        event("step/start", json!({"turn": 3, "step": 2})),
        event("assistant/message", json!({"content": "", "tool_calls": [call("c1", "search"), call("c2", "search")]})),
    ];
    append(&service, &owner(), "requested", Some("r1"), events).await;
    let before = stored_log(&service, TENANT_A, "requested").await.unwrap();
    drop(service);
    b.restart().await;

    let service = b.service();
    let outcome = resume(&service, "requested", "r2", OnBusy::Interrupt).await;
    assert_eq!(outcome.attachment.displaced[0].status, RunStatus::Interrupted);
    let last = &before[3];
    let closers = &outcome.repaired;
    assert_eq!(closers.len(), 4, "{closers:#?}");
    let mut first = tool_error("c1", TOOL_NOT_STARTED, "ToolNotStartedError");
    first["turn"] = json!(3);
    check_closer(&closers[0], 4, "r1", last, "tool/result", first);
    let mut second = tool_error("c2", TOOL_NOT_STARTED, "ToolNotStartedError");
    second["turn"] = json!(3);
    check_closer(&closers[1], 5, "r1", last, "tool/result", second);
    check_closer(&closers[2], 6, "r1", last, "step/end", json!({"turn": 3, "step": 2}));
    check_closer(&closers[3], 7, "r1", last, "turn/end", json!({"turn": 3, "reason": "interrupted"}));
    assert_eq!(outcome.checkpoint, None);
    assert_eq!(outcome.next_seq, 8);
    let after = stored_log(&service, TENANT_A, "requested").await.unwrap();
    assert_eq!(after.len(), 8);
    assert_eq!(after[4..], closers[..]);
    drop(service);
    resume_again_repairs_nothing(b, "requested", &after, None).await;
}

/// R-S5/R-S6 parallel: two runs interleave open turns; after a crash, one keeps
/// heartbeating, the other's lease lapses. Resume repairs only the lapsed run's turn
/// (closers carry its run id); the live run finishes its own turn; when its lease lapses
/// later, the next resume repairs it separately.
pub async fn parallel_resume_repairs_each_detached_run_separately(b: &dyn ServiceBackend) {
    let service = b.service();
    let clock = b.clock();
    create(&service, &owner(), "interleaved", parallel(4, DAY_MS, 1_000)).await;
    attach(&service, &owner(), "interleaved", "ra").await;
    attach(&service, &owner(), "interleaved", "rb").await;
    let steps: [(&str, NewEvent); 7] = [
        ("ra", event("turn/start", json!({"turn": 0}))),
        ("rb", event("turn/start", json!({"turn": 0}))),
        ("ra", user_message("a asks")),
        ("rb", event("step/start", json!({"turn": 0, "step": 0}))),
        ("ra", event("assistant/message", json!({"content": "", "tool_calls": [call("ca", "grep")]}))),
        ("rb", event("assistant/message", json!({"content": "", "tool_calls": [call("cb", "write")]}))),
        ("rb", event("tool/call", call("cb", "write"))),
    ];
    for (run_id, new_event) in steps {
        append(&service, &owner(), "interleaved", Some(run_id), vec![new_event]).await;
    }
    drop(service);
    b.restart().await;
    let service = b.service();

    clock.advance_ms(600);
    service.heartbeat(&owner(), &sid("interleaved"), &run("rb")).await.expect("rb is alive");
    clock.advance_ms(500);
    let first = resume(&service, "interleaved", "rc", OnBusy::Reject).await;
    let displaced: Vec<_> = first.attachment.displaced.iter().map(|r| (r.run_id.to_string(), r.status)).collect();
    assert_eq!(displaced, [("ra".to_owned(), RunStatus::Abandoned)]);
    let log = stored_log(&service, TENANT_A, "interleaved").await.unwrap();
    let last_of_ra = &log[4];
    assert_eq!(first.repaired.len(), 2, "{:#?}", first.repaired);
    check_closer(
        &first.repaired[0],
        7,
        "ra",
        last_of_ra,
        "tool/result",
        tool_error("ca", TOOL_NOT_STARTED, "ToolNotStartedError"),
    );
    check_closer(&first.repaired[1], 8, "ra", last_of_ra, "turn/end", json!({"turn": 0, "reason": "interrupted"}));
    assert_eq!(mark(&service, "interleaved").await, mark_at(&log, 1, None), "rb's open turn");

    // rb finishes its turn normally; nothing of it was touched.
    let finish = vec![
        event("tool/result", json!({"call_id": "cb", "content": "written"})),
        event("step/end", json!({"turn": 0, "step": 0})),
        event("turn/end", json!({"turn": 0, "reason": "completed"})),
        event("turn/start", json!({"turn": 1})),
        event("step/start", json!({"turn": 1, "step": 0})),
    ];
    append(&service, &owner(), "interleaved", Some("rb"), finish).await;
    clock.advance_ms(900);
    service.heartbeat(&owner(), &sid("interleaved"), &run("rc")).await.expect("rc is alive");
    let second = resume(&service, "interleaved", "rd", OnBusy::Reject).await;
    let displaced: Vec<_> = second.attachment.displaced.iter().map(|r| r.run_id.to_string()).collect();
    assert_eq!(displaced, ["rb"]);
    let log = stored_log(&service, TENANT_A, "interleaved").await.unwrap();
    let last_of_rb = &log[13];
    assert_eq!(second.repaired.len(), 2, "{:#?}", second.repaired);
    check_closer(&second.repaired[0], 14, "rb", last_of_rb, "step/end", json!({"turn": 1, "step": 0}));
    check_closer(&second.repaired[1], 15, "rb", last_of_rb, "turn/end", json!({"turn": 1, "reason": "interrupted"}));
    assert_eq!(log[14..], second.repaired[..]);
    assert_eq!(mark(&service, "interleaved").await, mark_at(&log, 16, None), "nothing open");
    let ra_events = log.iter().filter(|event| event.run == Some(run("ra"))).count();
    assert_eq!(ra_events, 5, "ra's turn was repaired once");
}

/// R-S6: resuming a balanced log appends nothing (and audits no repair) but still
/// returns the latest checkpoint; an empty log has none.
pub async fn resume_of_a_balanced_log_repairs_nothing(b: &dyn ServiceBackend) {
    let service = b.service();
    create(&service, &owner(), "balanced", serial(DAY_MS, RUN_LEASE_TTL_MS)).await;
    let empty = resume(&service, "balanced", "r0", OnBusy::Reject).await;
    assert_eq!((empty.repaired.len(), empty.checkpoint, empty.next_seq), (0, None, 0));
    let mut events = balanced_turn(0, "hello");
    events.push(event("checkpoint", json!({"state": {"n": 1}})));
    events.extend(balanced_turn(1, "again"));
    append(&service, &owner(), "balanced", Some("r0"), events).await;
    let log = stored_log(&service, TENANT_A, "balanced").await.unwrap();
    b.clock().advance_ms(RUN_LEASE_TTL_MS + 1);
    let outcome = resume(&service, "balanced", "r1", OnBusy::Reject).await;
    assert!(outcome.repaired.is_empty());
    assert_eq!(outcome.checkpoint.as_ref(), Some(&log[6]));
    assert_eq!(outcome.next_seq, 13);
    assert_eq!(stored_log(&service, TENANT_A, "balanced").await.unwrap(), log);
    assert!(audited(&service, TENANT_A, "repair").await.is_empty());
    assert!(stored(&service, TENANT_A, "balanced").await.unwrap().repair.is_empty(), "nothing to note");
    assert_eq!(outcome.attachment.session_lease_until, b.clock().now().plus_ms(DAY_MS));
}

/// The resume mark the session's record holds.
async fn mark(service: &SessionService, id: &str) -> ResumeMark {
    stored(service, TENANT_A, id).await.expect("stored").resume_mark
}

/// Writes a resume mark into the session's record by hand, as a record another build
/// (or a mark that lags its log) would hold.
async fn set_mark(service: &SessionService, id: &str, resume_mark: ResumeMark) {
    let record = stored(service, TENANT_A, id).await.expect("stored");
    let mut next = record.clone();
    next.resume_mark = resume_mark;
    next.revision = Revision(record.revision.0 + 1);
    service.catalog().update_activity(&next, record.revision).await.expect("write the mark");
}

/// The mark a resume leaves at `from` over `log`.
fn mark_at(log: &[Event], from: u64, checkpoint: Option<u64>) -> ResumeMark {
    let last = from.checked_sub(1).map(|seq| ResumeMark::fingerprint(&log[seq as usize]));
    ResumeMark { from, checkpoint, last }
}

/// R-S6: a resume reads the log from the mark the last resume left in the session's
/// record, not from its start: the oldest turn still open (of a run still attached), or
/// the log's end after the closers, with the latest checkpoint before it, read by its
/// seq. The mark only moves forward. A mark whose event before it is not the one it
/// fingerprinted (a log that lost its end and grew again), a mark past the log's end,
/// and a checkpoint seq that holds no checkpoint are not trusted.
pub async fn resume_reads_from_the_mark_the_last_resume_left(b: &dyn ServiceBackend) {
    let service = b.service();
    let clock = b.clock();
    create(&service, &owner(), "marked", serial(DAY_MS, RUN_LEASE_TTL_MS)).await;
    assert_eq!(mark(&service, "marked").await, ResumeMark::default(), "a new session reads from its start");
    attach(&service, &owner(), "marked", "r0").await;
    let mut events = balanced_turn(0, "hello");
    events.push(event("checkpoint", json!({"state": {"n": 1}})));
    events.extend(balanced_turn(1, "again"));
    append(&service, &owner(), "marked", Some("r0"), events).await;
    clock.advance_ms(RUN_LEASE_TTL_MS + 1);
    let first = resume(&service, "marked", "r1", OnBusy::Reject).await;
    assert!(first.repaired.is_empty());
    let log = stored_log(&service, TENANT_A, "marked").await.unwrap();
    assert_eq!(mark(&service, "marked").await, mark_at(&log, 13, Some(6)));
    assert_eq!(first.attachment.revision, stored(&service, TENANT_A, "marked").await.unwrap().revision);

    // r1 opens a turn and crashes: the next resume reads from 13, closes it, and moves
    // the mark past the closers; the checkpoint before the mark is read by its seq.
    append(&service, &owner(), "marked", Some("r1"), vec![event("turn/start", json!({"turn": 2})), user_message("x")])
        .await;
    drop(service);
    b.restart().await;
    let service = b.service();
    clock.advance_ms(RUN_LEASE_TTL_MS + 1);
    let second = resume(&service, "marked", "r2", OnBusy::Reject).await;
    let log = stored_log(&service, TENANT_A, "marked").await.unwrap();
    assert_eq!(second.repaired.len(), 1, "turn/end of turn 2: {:#?}", second.repaired);
    assert_eq!(second.repaired[..], log[15..]);
    assert_eq!(second.checkpoint.as_ref(), Some(&log[6]), "read by its seq");
    assert_eq!(mark(&service, "marked").await, mark_at(&log, 16, Some(6)));

    // r2 opens a turn and crashes. A mark past that turn's start hides it: the resume
    // reads from the mark. (Only a wrong mark does this; resume never writes one.)
    append(&service, &owner(), "marked", Some("r2"), vec![event("turn/start", json!({"turn": 3}))]).await;
    let log = stored_log(&service, TENANT_A, "marked").await.unwrap();
    set_mark(&service, "marked", mark_at(&log, 17, Some(6))).await;
    drop(service);
    b.restart().await;
    let service = b.service();
    clock.advance_ms(RUN_LEASE_TTL_MS + 1);
    let hidden = resume(&service, "marked", "r3", OnBusy::Reject).await;
    assert!(hidden.repaired.is_empty(), "read from the mark: {:#?}", hidden.repaired);
    assert_eq!(hidden.checkpoint.as_ref(), Some(&log[6]));

    // The same mark, but the event before it is not the one it fingerprinted (as when a
    // log lost its end and grew again): the whole log is read, and the turn is found and
    // closed.
    let mut other = mark_at(&log, 17, Some(6));
    other.last = Some(ResumeMark::fingerprint(&log[15]));
    set_mark(&service, "marked", other).await;
    clock.advance_ms(RUN_LEASE_TTL_MS + 1);
    let whole = resume(&service, "marked", "r4", OnBusy::Reject).await;
    let codes: Vec<_> = whole.repaired.iter().map(|closer| closer.event_type.to_string()).collect();
    assert_eq!(codes, ["turn/end"], "{:#?}", whole.repaired);
    assert_eq!(whole.repaired[0].run, Some(run("r2")));
    assert_eq!(whole.checkpoint.as_ref(), Some(&log[6]));
    let log = stored_log(&service, TENANT_A, "marked").await.unwrap();
    assert_eq!(mark(&service, "marked").await, mark_at(&log, 18, Some(6)));

    // A mark past the log's end is not trusted either: the whole log is read (nothing is
    // open now) and the mark is written again.
    set_mark(&service, "marked", ResumeMark { from: 1_000, checkpoint: Some(999), last: None }).await;
    clock.advance_ms(RUN_LEASE_TTL_MS + 1);
    let past = resume(&service, "marked", "r5", OnBusy::Reject).await;
    assert!(past.repaired.is_empty());
    assert_eq!(past.checkpoint.as_ref(), Some(&log[6]));
    assert_eq!(mark(&service, "marked").await, mark_at(&log, 18, Some(6)));

    // A mark naming a seq that holds no checkpoint: the checkpoint is looked for before
    // the mark instead, and the mark is mended.
    set_mark(&service, "marked", mark_at(&log, 18, Some(3))).await;
    clock.advance_ms(RUN_LEASE_TTL_MS + 1);
    let named_wrong = resume(&service, "marked", "r6", OnBusy::Reject).await;
    assert!(named_wrong.repaired.is_empty());
    assert_eq!(named_wrong.checkpoint.as_ref(), Some(&log[6]));
    assert_eq!(mark(&service, "marked").await, mark_at(&log, 18, Some(6)), "the one found");

    // A checkpoint after the mark is the one returned and the next mark's.
    append(&service, &owner(), "marked", Some("r6"), vec![event("checkpoint", json!({"state": {"n": 2}}))]).await;
    clock.advance_ms(RUN_LEASE_TTL_MS + 1);
    let later = resume(&service, "marked", "r7", OnBusy::Reject).await;
    let log = stored_log(&service, TENANT_A, "marked").await.unwrap();
    assert_eq!(later.checkpoint.as_ref(), Some(&log[18]));
    assert_eq!(mark(&service, "marked").await, mark_at(&log, 19, Some(18)));
    assert_eq!(audited(&service, TENANT_A, "repair").await.len(), 2, "the two repairs, audited");
}

async fn detach(service: &SessionService, id: &str, run_id: &str) {
    service
        .detach(&owner(), &sid(id), &run(run_id), "done", None)
        .await
        .unwrap_or_else(|error| panic!("detach {run_id} from {id}: {error}"));
}

/// R-S6: a detach that finds every turn in the log closed leaves the mark at the log's
/// end, so the next resume reads nothing the writer appended (a fresh reader after a
/// long writer read the whole log). It knows only from this process's appends since its
/// last resume that left nothing open: a turn left open (by the detaching run or another
/// still attached), an append made without such a resume (a plain attach, or after a
/// restart), keeps the mark where it was, and the next resume finds the turn.
pub async fn a_detach_with_every_turn_closed_marks_the_log_end(b: &dyn ServiceBackend) {
    let service = b.service();
    let clock = b.clock();
    create(&service, &owner(), "ended", serial(DAY_MS, RUN_LEASE_TTL_MS)).await;
    resume(&service, "ended", "r0", OnBusy::Reject).await;
    let mut events = balanced_turn(0, "hello");
    events.push(event("checkpoint", json!({"state": {"n": 1}})));
    events.push(user_message("more"));
    append(&service, &owner(), "ended", Some("r0"), events).await;
    append(&service, &owner(), "ended", Some("r0"), balanced_turn(1, "again")).await;
    detach(&service, "ended", "r0").await;
    let log = stored_log(&service, TENANT_A, "ended").await.unwrap();
    assert_eq!(log.len(), 14);
    assert_eq!(mark(&service, "ended").await, mark_at(&log, 14, Some(6)), "the end, the checkpoint before it");

    // The next resume reads from there; its run opens a turn and detaches with it open:
    // the mark stays, and the resume after finds the turn and closes it.
    let next = resume(&service, "ended", "r1", OnBusy::Reject).await;
    assert!(next.repaired.is_empty());
    assert_eq!(next.checkpoint.as_ref(), Some(&log[6]), "read by its seq");
    append(&service, &owner(), "ended", Some("r1"), vec![event("turn/start", json!({"turn": 2})), user_message("x")])
        .await;
    detach(&service, "ended", "r1").await;
    assert_eq!(mark(&service, "ended").await, mark_at(&log, 14, Some(6)), "not past the open turn");
    let closing = resume(&service, "ended", "r2", OnBusy::Reject).await;
    let types: Vec<_> = closing.repaired.iter().map(|closer| closer.event_type.to_string()).collect();
    assert_eq!(types, ["turn/end"], "{:#?}", closing.repaired);
    let log = stored_log(&service, TENANT_A, "ended").await.unwrap();
    assert_eq!(mark(&service, "ended").await, mark_at(&log, 17, Some(6)));

    // Appends the resume did not see through this process (a restart in between) leave
    // the mark alone, even with every turn closed.
    append(&service, &owner(), "ended", Some("r2"), balanced_turn(3, "before")).await;
    drop(service);
    b.restart().await;
    let service = b.service();
    append(&service, &owner(), "ended", Some("r2"), balanced_turn(4, "after")).await;
    detach(&service, "ended", "r2").await;
    assert_eq!(mark(&service, "ended").await, mark_at(&log, 17, Some(6)), "not followed since the restart");
    // A plain attach is not followed either.
    attach(&service, &owner(), "ended", "r3").await;
    append(&service, &owner(), "ended", Some("r3"), vec![user_message("plain")]).await;
    detach(&service, "ended", "r3").await;
    assert_eq!(mark(&service, "ended").await, mark_at(&log, 17, Some(6)), "attached, not resumed");
    let later = resume(&service, "ended", "r4", OnBusy::Reject).await;
    assert!(later.repaired.is_empty());
    let log = stored_log(&service, TENANT_A, "ended").await.unwrap();
    assert_eq!(log.len(), 30);
    assert_eq!(mark(&service, "ended").await, mark_at(&log, 30, Some(6)), "the resume's own mark");

    // Parallel runs: a run still attached with its turn open holds the mark back when
    // another detaches; once its turn is closed, the last detach marks the end.
    create(&service, &owner(), "shared", parallel(4, DAY_MS, RUN_LEASE_TTL_MS)).await;
    resume(&service, "shared", "a", OnBusy::Reject).await;
    attach(&service, &owner(), "shared", "b").await;
    append(&service, &owner(), "shared", Some("a"), vec![event("turn/start", json!({"turn": 0}))]).await;
    append(&service, &owner(), "shared", Some("b"), balanced_turn(0, "b's")).await;
    detach(&service, "shared", "b").await;
    assert_eq!(mark(&service, "shared").await, ResumeMark::default(), "a's turn is open");
    append(&service, &owner(), "shared", Some("a"), vec![event("turn/end", json!({"turn": 0, "reason": "completed"}))])
        .await;
    detach(&service, "shared", "a").await;
    let shared = stored_log(&service, TENANT_A, "shared").await.unwrap();
    assert_eq!(mark(&service, "shared").await, mark_at(&shared, 8, None));
    clock.advance_ms(1);
    let after = resume(&service, "shared", "c", OnBusy::Reject).await;
    assert!(after.repaired.is_empty() && after.checkpoint.is_none());
}
