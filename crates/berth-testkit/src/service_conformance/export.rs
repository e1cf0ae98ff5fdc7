//! Export / import clauses (R-S13): the logical log as canonical JSONL (header line +
//! event lines) and a ZIP of a session with its forks; export → import → export is
//! byte-identical, within one backend and between two (`roundtrip_between`).

use super::fixtures::*;
use super::ServiceBackend;
use berth_core::json::parse_strict;
use berth_core::{SessionId, Timestamp};
use berth_service::{MetadataUpdate, NewEvent, SessionService};
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// The root of the exported family and its forks, parents first (the ZIP's order:
/// breadth first, siblings by id).
pub const FAMILY: [&str; 4] = ["rich", "rich.f1", "rich.f2", "rich.f1.a"];

/// Builds `rich` (a parallel session with two attached runs, unicode and awkward
/// numbers, data kept exactly as submitted (R-C9: unsorted keys, a 30-digit integer,
/// `1.0`, `1e2`, `-0`, escapes), an explicit time, an ignorable extension event, a
/// checkpoint, title and labels) and its forks `rich.f1` (cut at 4), `rich.f1.a` (of the fork) and `rich.f2`.
pub async fn build_family(service: &SessionService) {
    create(service, &owner(), "rich", parallel(2, 30 * DAY_MS, DAY_MS)).await;
    let update = MetadataUpdate {
        title: Some(Some("Café ☕ — 日本語 \"quoted\"".into())),
        labels: Some(BTreeSet::from(["α".to_owned(), "beta".to_owned()])),
        expected_revision: None,
    };
    service.update_metadata(&owner(), &sid("rich"), update).await.expect("metadata");
    attach(service, &owner(), "rich", "ra").await;
    attach(service, &owner(), "rich", "rb").await;
    let mut stamped = event("myapp/note", json!({"text": "explicit time"}));
    stamped.time = Some(Timestamp(5));
    let mut ignorable = event("myapp/telemetry", json!([1, 2, 3]));
    ignorable.ignorable = true;
    let steps: Vec<(&str, NewEvent)> = vec![
        ("ra", event("turn/start", json!({"turn": 0}))),
        (
            "ra",
            event(
                "user/message",
                json!({
                    "content": "héllo 🦀 \u{2028} line separator, \"quotes\", back\\slash, \u{0001}",
                    "meta": {"z": 1, "a": [1.5, -0.25, 18446744073709551615u64, -9007199254740993i64, 0.1]},
                }),
            ),
        ),
        ("rb", event("turn/start", json!({"turn": 0}))),
        (
            "rb",
            event(
                "assistant/message",
                json!({"content": [{"type": "text", "text": "ok"}],
            "tool_calls": [{"call_id": "c1", "name": "grep", "arguments": {"pattern": "fn\\s+main"}}]}),
            ),
        ),
        ("rb", event("tool/call", json!({"call_id": "c1", "name": "grep", "arguments": {"pattern": "fn\\s+main"}}))),
        ("ra", stamped),
        ("rb", ignorable),
        ("rb", event("checkpoint", json!({"state": {"cursor": 7, "nested": {"deep": [null, true, false]}}}))),
        ("ra", event("step/start", json!({"turn": 0, "step": 0}))),
        ("rb", super::exact_data::exact_event()),
    ];
    for (run_id, new_event) in steps {
        append(service, &owner(), "rich", Some(run_id), vec![new_event]).await;
    }
    let forks = [("rich", Some(4), "rich.f1"), ("rich.f1", None, "rich.f1.a"), ("rich", None, "rich.f2")];
    for (source, upto_seq, fork_id) in forks {
        service
            .fork(&owner(), &sid(source), upto_seq, Some(sid(fork_id)))
            .await
            .unwrap_or_else(|error| panic!("fork {source} into {fork_id}: {error}"));
    }
}

/// Checks the JSONL shape of an export: a header line, then each stored event's
/// canonical envelope, every line `\n`-terminated.
async fn check_export_shape(service: &SessionService, id: &str, bytes: &[u8]) {
    assert_eq!(bytes.last(), Some(&b'\n'));
    let text = std::str::from_utf8(bytes).expect("exports are UTF-8");
    let lines: Vec<&str> = text.strip_suffix('\n').unwrap().split('\n').collect();
    let first: Value = parse_strict(lines[0].as_bytes()).expect("strict JSON header line");
    assert_eq!(first["berth"], "session-export");
    assert_eq!(first["version"], berth_service::EXPORT_VERSION);
    assert_eq!(first["header"]["id"], id);
    assert_eq!(first["header"]["scope"]["tenant"], TENANT_A);
    let record = stored(service, TENANT_A, id).await.expect("exported session");
    assert_eq!(first["metadata"]["revision"], record.revision.0);
    let log = stored_log(service, TENANT_A, id).await.expect("exported log");
    let event_lines: Vec<String> = log.iter().map(|event| event.to_canonical_json()).collect();
    assert_eq!(lines[1..], event_lines[..], "one canonical line per event");
}

async fn export_all(service: &SessionService, ids: &[&str]) -> Vec<Vec<u8>> {
    let mut exports = Vec::new();
    for id in ids {
        exports.push(service.export(&owner(), &sid(id)).await.expect("export"));
    }
    exports
}

async fn delete_all(service: &SessionService, ids: &[&str]) {
    for id in ids {
        service.delete(&admin(TENANT_A), &sid(id), None).await.expect("delete");
    }
}

/// R-S13 within one backend: export a session (canonical JSONL, audited), delete it,
/// import the bytes, and export again: the same bytes, the same record, the same log.
pub async fn export_import_export_is_byte_identical(b: &dyn ServiceBackend) {
    let service = b.service();
    build_family(&service).await;
    let record = stored(&service, TENANT_A, "rich").await.unwrap();
    let log = stored_log(&service, TENANT_A, "rich").await.unwrap();
    let first = service.export(&owner(), &sid("rich")).await.expect("export");
    check_export_shape(&service, "rich", &first).await;
    let exact_line = format!(",\"data\":{}}}\n", super::exact_data::EXACT_DATA);
    assert!(String::from_utf8_lossy(&first).ends_with(&exact_line), "data is exported verbatim");
    let exports = audited(&service, TENANT_A, "export").await;
    assert_eq!(exports.last().unwrap().draft.details["bytes"], first.len());
    assert_eq!(service.export(&owner(), &sid("rich")).await.unwrap(), first, "export is deterministic");

    delete_all(&service, &["rich"]).await;
    let imported = service.import(&owner(), &first).await.expect("import");
    assert_eq!(imported, record, "import keeps header and metadata exactly");
    assert_eq!(stored(&service, TENANT_A, "rich").await.as_ref(), Some(&record));
    assert_eq!(stored_log(&service, TENANT_A, "rich").await.unwrap(), log);
    let second = service.export(&owner(), &sid("rich")).await.expect("export again");
    assert_eq!(String::from_utf8_lossy(&second), String::from_utf8_lossy(&first));
    assert_eq!(second, first);
    let imports = audited(&service, TENANT_A, "import").await;
    assert_eq!(imports.len(), 1);
    assert_eq!(imports[0].draft.details["events"], log.len());

    // A restart: the old instance (and the write handles it keeps) is gone.
    drop(service);
    b.restart().await;
    let service = b.service();
    assert_eq!(service.export(&owner(), &sid("rich")).await.unwrap(), first, "and after a restart");
}

/// R-S13: `export_zip` holds the session and, recursively, its forks (parents first);
/// `import_zip` restores all of them, each exporting byte-identically; the re-exported
/// ZIP is byte-identical too. Sessions outside the family are untouched.
pub async fn export_zip_holds_the_session_and_its_forks(b: &dyn ServiceBackend) {
    let service = b.service();
    build_family(&service).await;
    create(&service, &owner(), "unrelated", serial(DAY_MS, DAY_MS)).await;
    let singles = export_all(&service, &FAMILY).await;
    let zip = service.export_zip(&owner(), &sid("rich")).await.expect("export zip");
    assert_eq!(service.export_zip(&owner(), &sid("rich")).await.unwrap(), zip, "deterministic");
    let entry = audited(&service, TENANT_A, "export").await.pop().unwrap();
    assert_eq!(entry.draft.details["sessions"], 4);
    let zip_of_fork = service.export_zip(&owner(), &sid("rich.f1")).await.unwrap();
    assert_ne!(zip_of_fork, zip, "a fork's ZIP holds only its own subtree");

    delete_all(&service, &FAMILY).await;
    let imported = service.import_zip(&owner(), &zip).await.expect("import zip");
    let order: Vec<SessionId> = imported.iter().map(|record| record.header.id.clone()).collect();
    assert_eq!(order, FAMILY.map(sid), "parents first");
    assert_eq!(export_all(&service, &FAMILY).await, singles);
    assert_eq!(service.export_zip(&owner(), &sid("rich")).await.unwrap(), zip);
    assert_eq!(service.export_zip(&owner(), &sid("rich.f1")).await.unwrap(), zip_of_fork);
    assert!(stored(&service, TENANT_A, "unrelated").await.is_some());
    let again = service.import_zip(&owner(), &zip).await;
    assert_eq!(label(&again), "already_exists");
}

/// R-S13 across backends: the family built on `from`, exported, imported into `to` and
/// exported there gives the same bytes — single session JSONL and the ZIP with forks.
pub async fn roundtrip_between(from: &dyn ServiceBackend, to: &dyn ServiceBackend) {
    let source = from.service();
    build_family(&source).await;
    let singles = export_all(&source, &FAMILY).await;
    let zip = source.export_zip(&owner(), &sid("rich")).await.expect("export zip");
    let target = to.service();

    let imported = target.import(&owner(), &singles[0]).await.expect("import single");
    assert_eq!(Some(imported), stored(&source, TENANT_A, "rich").await);
    let exported = target.export(&owner(), &sid("rich")).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&exported),
        String::from_utf8_lossy(&singles[0]),
        "{} → {}: single export",
        from.name(),
        to.name()
    );
    assert_eq!(stored_log(&target, TENANT_A, "rich").await, stored_log(&source, TENANT_A, "rich").await);

    delete_all(&target, &["rich"]).await;
    target.import_zip(&owner(), &zip).await.expect("import zip");
    assert_eq!(export_all(&target, &FAMILY).await, singles, "{} → {}: every session", from.name(), to.name());
    assert_eq!(target.export_zip(&owner(), &sid("rich")).await.unwrap(), zip, "{} → {}: zip", from.name(), to.name());
    // A restart: the old instance (and the write handles it keeps) is gone.
    drop(target);
    to.restart().await;
    let target = to.service();
    assert_eq!(target.export_zip(&owner(), &sid("rich")).await.unwrap(), zip, "after a restart of {}", to.name());
}
