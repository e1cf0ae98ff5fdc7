//! Golden files of every `/v1` body that travels: one file per type under
//! `tests/golden/`, one line per sample (the exact bytes `serde_json::to_string` gives:
//! what the server sends and the clients receive), a fully populated sample first and a
//! sample with every optional field unset second. Each line must also decode back to the
//! value it came from. A change to a wire type shows up as a diff of these files;
//! regenerate them with `BERTH_BLESS=1 cargo test -p berth-api --test golden` and review it.

use berth_api::events::SseMessage;
use berth_api::*;
use berth_core::{EventType, JsonText, ProjectId, Revision, RunId, Seq, SessionId, TenantId, Timestamp, UserId};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::BTreeSet;
use std::fmt::Debug;
use std::path::PathBuf;

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(format!("{name}.jsonl"))
}

/// Serializes every sample on its own line, compares the lines with the golden file byte
/// for byte (rewriting it under `BERTH_BLESS`), and decodes every golden line back to
/// its sample.
fn assert_golden<T: Serialize + DeserializeOwned + PartialEq + Debug>(name: &str, samples: &[T]) {
    let path = golden_path(name);
    let serialized: String =
        samples.iter().map(|sample| serde_json::to_string(sample).unwrap() + "\n").collect::<Vec<_>>().concat();
    berth_golden::assert_golden(&path, name, serialized.as_bytes());
    // Equal to the golden file by now: decode its lines back.
    let lines: Vec<&str> = serialized.lines().collect();
    assert_eq!(lines.len(), samples.len(), "{name}: one golden line per sample");
    for (line, sample) in lines.iter().zip(samples) {
        let decoded: T = serde_json::from_str(line).unwrap_or_else(|error| panic!("{name}: {line}: {error}"));
        assert_eq!(&decoded, sample, "{name}: the golden line decodes to another value");
    }
}

fn sid(text: &str) -> SessionId {
    SessionId::parse(text).unwrap()
}

fn rid(text: &str) -> RunId {
    RunId::parse(text).unwrap()
}

fn uid(text: &str) -> UserId {
    UserId::parse(text).unwrap()
}

fn labels(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
}

fn json(text: &str) -> JsonText {
    JsonText::parse(text).unwrap()
}

const T0: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

fn run(id: &str, status: RunStatus) -> RunBody {
    RunBody {
        run_id: rid(id),
        attached_by: uid("alice"),
        attached_at: Timestamp(T0 + 1_000),
        lease_until: Timestamp(T0 + 31_000),
        status,
    }
}

fn full_session() -> SessionBody {
    SessionBody {
        header: HeaderBody {
            version: 1,
            id: sid("chat-2"),
            scope: ScopeBody {
                tenant: TenantId::parse("acme").unwrap(),
                user: uid("alice"),
                project: Some(ProjectId::parse("support").unwrap()),
            },
            created_at: Timestamp(T0),
            parent: Some(ParentBody { session: sid("chat-1"), cut_seq: 4 }),
            origin: Some("import:legacy".into()),
            delegation_depth: 2,
            policy: PolicyBody {
                concurrency: ConcurrencyBody::Parallel { runs_max: 4 },
                activity_ttl_ms: 3_600_000,
                run_lease_ttl_ms: 30_000,
            },
        },
        status: SessionStatus::Active,
        lease_until: Timestamp(T0 + 3_600_000),
        last_activity: Timestamp(T0 + 2_000),
        revision: Revision(7),
        title: Some("Refund for order #12 — \"urgent\"".into()),
        labels: labels(&["billing", "vip"]),
        event_count: 9,
        blank: false,
        runs: vec![run("run-1", RunStatus::Attached), run("run-2", RunStatus::Attached)],
        status_changed_at: Timestamp(T0 + 1_000),
    }
}

fn bare_session() -> SessionBody {
    SessionBody {
        header: HeaderBody {
            version: 1,
            id: sid("chat-1"),
            scope: ScopeBody { tenant: TenantId::parse("acme").unwrap(), user: uid("alice"), project: None },
            created_at: Timestamp(T0),
            parent: None,
            origin: None,
            delegation_depth: 0,
            policy: PolicyBody {
                concurrency: ConcurrencyBody::Serial {},
                activity_ttl_ms: 86_400_000,
                run_lease_ttl_ms: 60_000,
            },
        },
        status: SessionStatus::Creating,
        lease_until: Timestamp(T0 + 86_400_000),
        last_activity: Timestamp(T0),
        revision: Revision(0),
        title: None,
        labels: BTreeSet::new(),
        event_count: 0,
        blank: true,
        runs: Vec::new(),
        status_changed_at: Timestamp(T0),
    }
}

fn full_event() -> EventBody {
    EventBody {
        seq: Seq(3),
        event_type: EventType::parse("tool/call").unwrap(),
        time: Timestamp(T0 + 1_500),
        run: Some(rid("run-1")),
        data: json(r#"{"call_id":"c1","name":"ls","arguments":{"path":"/tmp","n":1.50}}"#),
        ignorable: true,
        idempotency_key: Some("batch-7".into()),
    }
}

fn bare_event() -> EventBody {
    EventBody {
        seq: Seq(0),
        event_type: EventType::parse("turn/start").unwrap(),
        time: Timestamp(T0),
        run: None,
        data: JsonText::null(),
        ignorable: false,
        idempotency_key: None,
    }
}

fn attachment(displaced: Vec<RunBody>) -> AttachmentBody {
    AttachmentBody {
        run: run("run-3", RunStatus::Attached),
        revision: Revision(8),
        session_lease_until: Timestamp(T0 + 3_600_000),
        displaced,
    }
}

#[test]
fn session_bodies() {
    assert_golden("SessionBody", &[full_session(), bare_session()]);
    assert_golden(
        "SessionPage",
        &[
            SessionPage {
                items: vec![full_session(), bare_session()],
                next_cursor: Some("1767225602000.chat-2".into()),
            },
            SessionPage { items: Vec::new(), next_cursor: None },
        ],
    );
    assert_golden(
        "CreateSessionBody",
        &[
            CreateSessionBody {
                id: Some(sid("chat-2")),
                user: Some(uid("alice")),
                project: Some(ProjectId::parse("support").unwrap()),
                policy: Some(PolicyBody {
                    concurrency: ConcurrencyBody::Parallel { runs_max: 4 },
                    activity_ttl_ms: 3_600_000,
                    run_lease_ttl_ms: 30_000,
                }),
                title: Some("Refund".into()),
                labels: labels(&["billing", "vip"]),
                origin: Some("import:legacy".into()),
                delegation_depth: 2,
            },
            CreateSessionBody::default(),
        ],
    );
    assert_golden(
        "UpdateSessionBody",
        &[
            UpdateSessionBody {
                title: Some(Some("Renamed".into())),
                labels: Some(labels(&["a", "b"])),
                expected_revision: Some(7),
            },
            UpdateSessionBody { title: Some(None), labels: Some(BTreeSet::new()), expected_revision: None },
            UpdateSessionBody::default(),
        ],
    );
    assert_golden(
        "CloseBody",
        &[CloseBody { policy: ClosePolicy::CancelRuns, expected_revision: Some(7) }, CloseBody::default()],
    );
    assert_golden(
        "ForkBody",
        &[
            ForkBody { upto_seq: Some(4), new_id: Some(sid("chat-2")), ..ForkBody::default() },
            ForkBody {
                upto_seq: Some(0),
                new_id: Some(sid("thread-9")),
                user: Some(uid("alice")),
                policy: Some(PolicyBody {
                    concurrency: ConcurrencyBody::Serial {},
                    activity_ttl_ms: 3_600_000,
                    run_lease_ttl_ms: 30_000,
                }),
                title: Some("thread-9".into()),
                labels: Some(labels(&["langgraph"])),
            },
            ForkBody::default(),
        ],
    );
}

#[test]
fn event_bodies() {
    assert_golden("EventBody", &[full_event(), bare_event()]);
    assert_golden(
        "NewEventBody",
        &[
            NewEventBody {
                event_type: "user/message".into(),
                data: json(r#"{"content":"hi","z":1,"a":[true,null]}"#),
                time: Some(Timestamp(T0 + 10)),
                ignorable: true,
            },
            NewEventBody { event_type: "turn/start".into(), data: JsonText::null(), time: None, ignorable: false },
        ],
    );
    let new_event = NewEventBody { event_type: "turn/start".into(), data: json("{}"), time: None, ignorable: false };
    assert_golden(
        "AppendBody",
        &[
            AppendBody {
                run: Some(rid("run-1")),
                expected_seq: Some(3),
                events: vec![new_event.clone(), new_event],
                idempotency_key: Some("batch-7".into()),
                memory: Vec::new(),
            },
            AppendBody { run: None, expected_seq: None, events: Vec::new(), idempotency_key: None, memory: Vec::new() },
        ],
    );
    assert_golden(
        "AppendOutcomeBody",
        &[
            AppendOutcomeBody { first_seq: 3, next_seq: 5, duplicate: true },
            AppendOutcomeBody { first_seq: 0, next_seq: 0, duplicate: false },
        ],
    );
    assert_golden(
        "EventPage",
        &[
            EventPage { events: vec![bare_event(), full_event()], next_seq: 4, first_seq: 0 },
            EventPage { events: Vec::new(), next_seq: 9, first_seq: 9 },
        ],
    );
    assert_golden(
        "SseMessage",
        &[
            SseMessage {
                event: Some("event".into()),
                id: Some("3".into()),
                data: serde_json::to_string(&full_event()).unwrap(),
            },
            SseMessage { event: None, id: None, data: String::new() },
        ],
    );
}

#[test]
fn run_bodies() {
    assert_golden(
        "RunBody",
        &[
            run("run-1", RunStatus::Attached),
            run("run-2", RunStatus::Detached),
            run("run-3", RunStatus::Abandoned),
            run("run-4", RunStatus::Interrupted),
            run("run-5", RunStatus::Cancelled),
        ],
    );
    assert_golden(
        "AttachBody",
        &[
            AttachBody { run_id: Some(rid("run-3")), expected_revision: Some(7), on_busy: OnBusy::Interrupt },
            AttachBody::default(),
        ],
    );
    assert_golden("AttachmentBody", &[attachment(vec![run("run-1", RunStatus::Interrupted)]), attachment(Vec::new())]);
    assert_golden(
        "DetachBody",
        &[DetachBody { outcome: "failed: tool crashed".into(), expected_revision: Some(8) }, DetachBody::default()],
    );
    assert_golden(
        "ResumeOutcomeBody",
        &[
            ResumeOutcomeBody {
                attachment: attachment(vec![run("run-1", RunStatus::Abandoned)]),
                repaired: vec![full_event()],
                checkpoint: Some(bare_event()),
                next_seq: 4,
            },
            ResumeOutcomeBody {
                attachment: attachment(Vec::new()),
                repaired: Vec::new(),
                checkpoint: None,
                next_seq: 0,
            },
        ],
    );
}

#[test]
fn admin_bodies() {
    assert_golden(
        "ImportedBody",
        &[ImportedBody { sessions: vec![full_session()] }, ImportedBody { sessions: Vec::new() }],
    );
    assert_golden(
        "AuditEntryBody",
        &[
            AuditEntryBody {
                seq: 12,
                tenant: TenantId::parse("acme").unwrap(),
                time: Timestamp(T0 + 5),
                actor: "user:alice".into(),
                action: "session.close".into(),
                session: Some(sid("chat-1")),
                revision: Some(Revision(3)),
                outcome: "ok".into(),
                details: serde_json::json!({"runs_cancelled": ["run-1"], "events": 4}),
                prev_hash: "0".repeat(64),
                hash: "ab".repeat(32),
            },
            AuditEntryBody {
                seq: 0,
                tenant: TenantId::parse("acme").unwrap(),
                time: Timestamp(T0),
                actor: "system:sweeper".into(),
                action: "retention.set".into(),
                session: None,
                revision: None,
                outcome: "denied".into(),
                details: serde_json::Value::Null,
                prev_hash: String::new(),
                hash: "cd".repeat(32),
            },
        ],
    );
    assert_golden(
        "AuditVerificationBody",
        &[
            AuditVerificationBody { entries: 12, broken_at: Some(5), reason: Some("hash mismatch".into()) },
            AuditVerificationBody { entries: 0, broken_at: None, reason: None },
        ],
    );
    assert_golden(
        "RetentionPolicyBody",
        &[
            RetentionPolicyBody {
                idle_ttl_ms: Some(86_400_000),
                max_age_ms: Some(604_800_000),
                delete_terminal_after_ms: Some(3_600_000),
                memory_max_age_ms: Some(31_536_000_000),
            },
            RetentionPolicyBody::default(),
        ],
    );
    assert_golden(
        "BackupRequestBody",
        &[
            BackupRequestBody { name: "nightly-2026-12-07".into(), since: Some("nightly-2026-12-06".into()) },
            BackupRequestBody { name: "first".into(), since: None },
        ],
    );
    assert_golden(
        "BackupBody",
        &[
            BackupBody {
                id: "01940000-0000-7000-8000-000000000002".into(),
                name: "nightly-2026-12-07".into(),
                kind: "incremental".into(),
                previous: Some("01940000-0000-7000-8000-000000000001".into()),
                snapshot_at: Timestamp(T0 + 7),
                sessions: 120,
                logs_copied: 14,
                logs_unchanged: 106,
                vanished: 1,
                bytes: 5_242_880,
                duration_ms: 1_250,
            },
            BackupBody {
                id: "01940000-0000-7000-8000-000000000001".into(),
                name: "first".into(),
                kind: "full".into(),
                previous: None,
                snapshot_at: Timestamp(T0),
                sessions: 0,
                logs_copied: 0,
                logs_unchanged: 0,
                vanished: 0,
                bytes: 4_096,
                duration_ms: 3,
            },
        ],
    );
    assert_golden(
        "PrincipalBody",
        &[
            PrincipalBody {
                tenant: TenantId::parse("acme").unwrap(),
                user: uid("svc"),
                project: Some(ProjectId::parse("support").unwrap()),
                role: Role::Service,
            },
            PrincipalBody {
                tenant: TenantId::parse("acme").unwrap(),
                user: uid("alice"),
                project: None,
                role: Role::User,
            },
            PrincipalBody {
                tenant: TenantId::parse("acme").unwrap(),
                user: uid("root"),
                project: None,
                role: Role::Admin,
            },
        ],
    );
}

#[test]
fn error_bodies() {
    let mut full = ErrorBody::new("limit_exceeded", "limit exceeded: page_size is 2000, limit 1000");
    full.expected = Some(3);
    full.actual = Some(2000);
    full.limit = Some(1000);
    full.limit_name = Some("page_size".into());
    full.state = Some("closed".into());
    full.run = Some("run-1".into());
    assert_golden(
        "ErrorBody",
        &[full, ErrorBody::new("rate_limited", "too many requests"), ErrorBody::new("not_found", "session not found")],
    );
}

fn model_usage(provider: Option<&str>, model: &str, calls: u64) -> ModelUsageBody {
    ModelUsageBody {
        provider: provider.map(str::to_owned),
        model: model.into(),
        calls,
        errors: 1,
        input_tokens: 1200,
        output_tokens: 300,
        cached_tokens: 800,
        model_ms: 1520.25,
    }
}

#[test]
fn usage_bodies() {
    let by_model = vec![model_usage(None, "unknown", 1), model_usage(Some("openai"), "gpt-4o", 2)];
    assert_golden(
        "SessionUsageBody",
        &[
            SessionUsageBody {
                session: sid("chat-1"),
                calls: 3,
                errors: 2,
                input_tokens: 2400,
                output_tokens: 600,
                cached_tokens: 1600,
                model_ms: 3040.5,
                tool_calls: 4,
                tool_ms: 950,
                by_model: by_model.clone(),
            },
            SessionUsageBody {
                session: sid("quiet"),
                calls: 0,
                errors: 0,
                input_tokens: 0,
                output_tokens: 0,
                cached_tokens: 0,
                model_ms: 0.0,
                tool_calls: 0,
                tool_ms: 0,
                by_model: Vec::new(),
            },
        ],
    );
    assert_golden(
        "UsageBody",
        &[
            UsageBody {
                since: Timestamp(T0),
                before: Timestamp(T0 + 86_400_000),
                sessions: 2,
                calls: 3,
                errors: 2,
                input_tokens: 2400,
                output_tokens: 600,
                cached_tokens: 1600,
                model_ms: 3040.5,
                tool_calls: 4,
                tool_ms: 950,
                by_model,
            },
            UsageBody {
                since: Timestamp(T0),
                before: Timestamp(T0 + 1),
                sessions: 0,
                calls: 0,
                errors: 0,
                input_tokens: 0,
                output_tokens: 0,
                cached_tokens: 0,
                model_ms: 0.0,
                tool_calls: 0,
                tool_ms: 0,
                by_model: Vec::new(),
            },
        ],
    );
}
