//! Golden files of what the SQLite and PostgreSQL catalogs store as JSON: the session
//! record (`record_json`, `serde_json::to_string(&SessionRecord)` in both), the audit
//! entry and the retention policy. Rows written by one build are read by the next, so
//! this encoding is a storage format: a change shows up as a diff of `tests/golden/`
//! (regenerate with `BERTH_BLESS=1 cargo test -p berth-catalog --test stored_json_golden`
//! and make sure old rows still decode). Each golden line must decode back to its sample.

use berth_catalog::{AuditDraft, AuditEntry, RepairNote, ResumeMark, RetentionPolicy, RunAt, RunRecord, RunStatus};
use berth_catalog::{CreatorMark, SessionRecord};
use berth_core::lifecycle::Status;
use berth_core::{Concurrency, ParentRef, Scope, SessionHeader, SessionPolicy};
use berth_core::{ProjectId, Revision, RunId, SessionId, TenantId, Timestamp, UserId};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::Debug;
use std::path::PathBuf;

/// Compares one line per sample with `tests/golden/<name>.jsonl` byte for byte
/// (rewriting it under `BERTH_BLESS`) and decodes every line back to its sample.
fn assert_golden<T: Serialize + DeserializeOwned + PartialEq + Debug>(name: &str, samples: &[T]) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(format!("{name}.jsonl"));
    let serialized: String = samples.iter().map(|sample| serde_json::to_string(sample).unwrap() + "\n").collect();
    berth_golden::assert_golden(&path, name, serialized.as_bytes());
    // Equal to the golden file by now: decode its lines back.
    assert_eq!(serialized.lines().count(), samples.len());
    for (line, sample) in serialized.lines().zip(samples) {
        let decoded: T = serde_json::from_str(line).unwrap_or_else(|error| panic!("{name}: {line}: {error}"));
        assert_eq!(&decoded, sample);
    }
}

const T0: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

fn run(id: &str, status: RunStatus, offset_ms: u64) -> RunRecord {
    RunRecord {
        run_id: RunId::parse(id).unwrap(),
        attached_by: UserId::parse("alice").unwrap(),
        attached_at: Timestamp(T0 + offset_ms),
        lease_until: Timestamp(T0 + offset_ms + 30_000),
        status,
    }
}

fn scope(project: Option<&str>) -> Scope {
    Scope {
        tenant: TenantId::parse("acme").unwrap(),
        user: UserId::parse("alice").unwrap(),
        project: project.map(|project| ProjectId::parse(project).unwrap()),
    }
}

/// A fork of `chat-1` with every optional field set and runs of several statuses.
fn full_record() -> SessionRecord {
    let mut header = SessionHeader::new(SessionId::parse("chat-2").unwrap(), scope(Some("support")), Timestamp(T0));
    header.parent = Some(ParentRef { session: SessionId::parse("chat-1").unwrap(), cut_seq: 4 });
    header.origin = Some("subagent".into());
    header.delegation_depth = 2;
    header.policy = SessionPolicy {
        concurrency: Concurrency::Parallel { runs_max: 4 },
        activity_ttl_ms: 3_600_000,
        run_lease_ttl_ms: 30_000,
    };
    SessionRecord {
        header,
        status: Status::Active,
        lease_until: Timestamp(T0 + 3_600_000),
        last_activity: Timestamp(T0 + 2_000),
        revision: Revision(7),
        title: Some("Refund for order #12 — \"urgent\"".into()),
        labels: ["billing", "vip"].iter().map(|label| (*label).to_owned()).collect(),
        event_count: 9,
        blank: false,
        runs: vec![
            run("run-1", RunStatus::Attached, 1_000),
            run("run-2", RunStatus::Interrupted, 1_500),
            run("run-3", RunStatus::Abandoned, 1_700),
        ],
        status_changed_at: Timestamp(T0 + 1_000),
        resume_mark: ResumeMark { from: 5, checkpoint: Some(3), last: Some("0123456789abcdef".into()) },
        repair: RepairNote {
            interrupted: Some(RunAt { run: RunId::parse("run-0").unwrap(), at: Timestamp(T0 + 900) }),
            repaired_by: Some(RunAt { run: RunId::parse("run-1").unwrap(), at: Timestamp(T0 + 1_000) }),
        },
        creator: None,
    }
}

/// A fresh top-level session: nothing optional set.
fn bare_record() -> SessionRecord {
    let header = SessionHeader::new(SessionId::parse("chat-1").unwrap(), scope(None), Timestamp(T0));
    SessionRecord {
        lease_until: Timestamp(T0 + header.policy.activity_ttl_ms),
        header,
        status: Status::Creating,
        last_activity: Timestamp(T0),
        revision: Revision(0),
        title: None,
        labels: Default::default(),
        event_count: 0,
        blank: true,
        runs: Vec::new(),
        status_changed_at: Timestamp(T0),
        resume_mark: Default::default(),
        repair: Default::default(),
        creator: None,
    }
}

#[test]
fn the_session_record_column_is_pinned() {
    let mut closed = bare_record();
    closed.status = Status::Closed;
    closed.runs = vec![run("run-9", RunStatus::Detached, 10), run("run-8", RunStatus::Cancelled, 20)];
    let mut creating = bare_record();
    creating.creator = Some(CreatorMark {
        boot: "0f4c7a4e-2d0b-4c55-9a51-7d3b8e1f6a20".into(),
        pid_namespace: "pid:[4026531836]".into(),
        pid: 4242,
        started: 987_654,
    });
    assert_golden("SessionRecord", &[full_record(), bare_record(), closed, creating]);
}

#[test]
fn the_audit_entry_and_retention_policy_columns_are_pinned() {
    let draft = AuditDraft {
        tenant: TenantId::parse("acme").unwrap(),
        time: Timestamp(T0 + 5),
        actor: "user:alice".into(),
        action: "session.close".into(),
        session: Some(SessionId::parse("chat-1").unwrap()),
        revision: Some(Revision(3)),
        outcome: "ok".into(),
        details: serde_json::json!({"runs_cancelled": ["run-1"], "events": 4}),
    };
    let bare_draft = AuditDraft {
        session: None,
        revision: None,
        details: serde_json::Value::Null,
        actor: "system:sweeper".into(),
        ..draft.clone()
    };
    let entry = |seq: u64, draft: AuditDraft| {
        let prev_hash = berth_catalog::audit::GENESIS_HASH.to_owned();
        let hash = berth_catalog::audit::entry_hash(seq, &draft, &prev_hash);
        AuditEntry { seq, draft, prev_hash, hash }
    };
    assert_golden("AuditEntry", &[entry(0, draft), entry(1, bare_draft)]);
    let full = RetentionPolicy {
        idle_ttl_ms: Some(86_400_000),
        max_age_ms: Some(604_800_000),
        delete_terminal_after_ms: Some(3_600_000),
        memory_max_age_ms: None,
    };
    let memory = RetentionPolicy { memory_max_age_ms: Some(31_536_000_000), ..RetentionPolicy::default() };
    assert_golden("RetentionPolicy", &[full, RetentionPolicy::default(), memory]);
}

/// `ResumeMark::fingerprint` is stored in records (`resume_mark.last`): a change of its
/// input layout would make every stored mark untrusted (read from the log's start again,
/// so not wrong, but every session's next resume slower). Pinned here.
#[test]
fn the_resume_mark_fingerprint_is_pinned() {
    let mut event = berth_core::Event::new(
        41,
        "assistant/message",
        Timestamp(T0 + 5),
        serde_json::json!({"content": "hello", "n": 1}),
    )
    .unwrap();
    let pinned = "de3bce3272368c3f";
    assert_eq!(ResumeMark::fingerprint(&event), pinned);
    event.run = Some(RunId::parse("run-1").unwrap());
    assert_ne!(ResumeMark::fingerprint(&event), pinned, "the run is part of it");
}
