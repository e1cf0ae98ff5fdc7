//! The JSONL backend's own behaviour beyond the shared contract: on-disk layout and
//! naming, symlink refusal, the in-process view of the writer lease and epoch, bounded
//! memory (sparse index), reader freshness, change tokens, listing, erase and fsck.

mod jsonl_common;

use berth_core::{Epoch, Error, SESSION_FORMAT_VERSION};
use berth_jsonl::format::{self, BROKEN_PREFIX};
use berth_jsonl::fsck::{self, SessionStatus};
use berth_jsonl::JsonlBackend;
use berth_jsonl::INDEX_ENTRIES_MAX;
use berth_store::{Access, ListQuery, LogReader, LogWriter};
use jsonl_common::*;
use std::os::unix::fs::PermissionsExt;

#[tokio::test]
async fn layout_is_tenant_then_id_with_private_modes_and_jq_readable_lines() {
    let root = tempfile::tempdir().unwrap();
    let backend = backend(root.path());
    let store = store(&backend);
    let handle = store.create(header("acme", ".hidden~id")).await.unwrap();
    handle.append(&[message(0, "hello \"world\"\n")]).await.unwrap();
    handle.close().await.unwrap();
    let key = key("acme", ".hidden~id");
    let dir = backend.session_dir(&key);
    assert_eq!(dir, root.path().join("tenants/acme/sessions/%2Ehidden~id"));
    assert_eq!(backend.log_path(&key), dir.join("session.jsonl"));
    for path in [
        root.path().join("tenants"),
        root.path().join("tenants/acme"),
        root.path().join("tenants/acme/sessions"),
        dir.clone(),
    ] {
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o700, "{}", path.display());
    }
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    // No `session.epoch` yet: the creating writer's epoch is in the log's header.
    assert_eq!(names, ["session.jsonl", "session.lock"]);
    let text = std::fs::read_to_string(backend.log_path(&key)).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(lines[0]["berth"], "session");
    assert_eq!(lines[0]["id"], ".hidden~id");
    assert_eq!(lines[1]["data"]["content"], "hello \"world\"\n");
    assert_eq!(lines[1]["epoch"], 1);
    assert!(lines[1]["crc"].as_str().unwrap().len() == 8);
}

#[tokio::test]
async fn symlinks_inside_the_root_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let backend = backend(root.path());
    let store = store(&backend);
    let handle = store.create(header("t", "s")).await.unwrap();
    handle.append(&[message(0, "a")]).await.unwrap();
    handle.close().await.unwrap();
    let key = key("t", "s");
    // The log replaced by a symlink to a file outside the root.
    let outside = elsewhere.path().join("victim.jsonl");
    std::fs::rename(backend.log_path(&key), &outside).unwrap();
    std::os::unix::fs::symlink(&outside, backend.log_path(&key)).unwrap();
    assert_eq!(store.open(&key, Access::Read).await.unwrap_err().code(), "corrupt");
    assert_eq!(store.open(&key, Access::Write).await.unwrap_err().code(), "corrupt");
    assert_eq!(store.stat(&key).await.unwrap_err().code(), "corrupt");
    // A session directory that is a symlink.
    let other = jsonl_common::key("t", "other");
    std::fs::create_dir_all(elsewhere.path().join("planted")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path().join("planted"), backend.session_dir(&other)).unwrap();
    assert_eq!(store.open(&other, Access::Write).await.unwrap_err().code(), "corrupt");
    assert_eq!(store.create(header("t", "other")).await.unwrap_err().code(), "corrupt");
    assert!(std::fs::read_dir(elsewhere.path().join("planted")).unwrap().next().is_none(), "nothing written outside");
}

#[tokio::test]
async fn second_instance_is_refused_and_epochs_only_grow() {
    let root = tempfile::tempdir().unwrap();
    let first = backend(root.path());
    let second = backend(root.path());
    let key = key("t", "s");
    let store_a = store(&first);
    let handle = store_a.create(header("t", "s")).await.unwrap();
    handle.flush().await.unwrap();
    let error = second.open_jsonl_writer(&key).await.err().unwrap();
    assert!(matches!(error, Error::AlreadyOwned { .. }), "{error}");
    let mut reader = second.open_jsonl_reader(&key).await.unwrap();
    assert!(reader.read(0, 10).await.unwrap().is_empty(), "readers never need the lease");
    handle.close().await.unwrap();
    let mut epochs = Vec::new();
    for _ in 0..3 {
        let mut writer = second.open_jsonl_writer(&key).await.unwrap();
        epochs.push(writer.epoch());
        writer.release().await.unwrap();
        writer.release().await.unwrap(); // idempotent
    }
    assert_eq!(epochs, [Epoch(2), Epoch(3), Epoch(4)]);
    let stored = std::fs::read(first.session_dir(&key).join(format::EPOCH_FILE)).unwrap();
    assert_eq!(format::decode_epoch_record(&stored), Some(Epoch(4)));
    assert!(first.session_dir(&key).join(format::LOCK_FILE).exists(), "the lock file is never unlinked");
}

#[tokio::test]
async fn reads_hold_bounded_memory_and_match_the_log() {
    let root = tempfile::tempdir().unwrap();
    let backend = backend(root.path());
    let store = store(&backend);
    let key = key("t", "s");
    let handle = store.create(header("t", "s")).await.unwrap();
    let total = 5_000u64;
    let events: Vec<_> = (0..total).map(|seq| message(seq, &seq.to_string())).collect();
    for chunk in events.chunks(1_000) {
        handle.append(chunk).await.unwrap();
    }
    handle.close().await.unwrap();
    let mut writer = backend.open_jsonl_writer(&key).await.unwrap();
    assert!(writer.index_entries() <= INDEX_ENTRIES_MAX);
    let mut reader = backend.open_jsonl_reader(&key).await.unwrap();
    let mut rng_state = 7u64;
    for _ in 0..50 {
        rng_state = rng_state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let offset = (rng_state >> 33) % (total + 10);
        let length = (rng_state >> 13) % 40;
        let expected: Vec<_> = events.iter().skip(offset as usize).take(length as usize).cloned().collect();
        assert!(reader.read(offset, length).await.unwrap() == expected, "reader {offset}+{length}");
        assert!(writer.read(offset, length).await.unwrap() == expected, "writer {offset}+{length}");
        assert!(reader.index_entries() <= INDEX_ENTRIES_MAX);
    }
    assert_eq!(reader.read(0, u64::MAX).await.unwrap().len() as u64, total);
    assert!(reader.index_entries() <= INDEX_ENTRIES_MAX && reader.index_entries() > 100);
    writer.append(&[message(total, "more")]).await.unwrap();
    assert_eq!(writer.read(total, 5).await.unwrap().len(), 1);
    writer.release().await.unwrap();
}

#[tokio::test]
async fn readers_see_later_appends_and_never_a_line_in_progress() {
    let root = tempfile::tempdir().unwrap();
    let backend = backend(root.path());
    let key = key("t", "s");
    let other_instance = store_of(root.path());
    let handle = store(&backend).create(header("t", "s")).await.unwrap();
    handle.append(&[message(0, "a")]).await.unwrap();
    let reader = other_instance.open(&key, Access::Read).await.unwrap();
    assert_eq!(reader.read(0, None).await.unwrap().len(), 1);
    handle.append(&[message(1, "b"), message(2, "c")]).await.unwrap();
    assert_eq!(reader.read(0, None).await.unwrap().len(), 3, "fresh on every read");
    handle.close().await.unwrap();
    // An append in progress: half a line at the end is not served, and not an error.
    let line = format::encode_event_line(&message(3, "in progress"), Epoch(1));
    let log = backend.log_path(&key);
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.extend_from_slice(&line[..line.len() / 2]);
    std::fs::write(&log, &bytes).unwrap();
    assert_eq!(reader.read(0, None).await.unwrap().len(), 3);
    bytes.extend_from_slice(&line[line.len() / 2..]);
    std::fs::write(&log, &bytes).unwrap();
    assert_eq!(reader.read(0, None).await.unwrap().len(), 4, "completed line is served");
}

#[tokio::test]
async fn change_token_ignores_ownership_churn_and_tracks_content() {
    let root = tempfile::tempdir().unwrap();
    let backend = backend(root.path());
    let store = store(&backend);
    let key = key("t", "s");
    let handle = store.create(header("t", "s")).await.unwrap();
    handle.append(&[message(0, "a")]).await.unwrap();
    handle.close().await.unwrap();
    let first = store.stat(&key).await.unwrap().unwrap();
    assert!(first.size_bytes.unwrap() > 0);
    let handle = store.open(&key, Access::Write).await.unwrap();
    handle.close().await.unwrap();
    let _reader = store.open(&key, Access::Read).await.unwrap();
    assert_eq!(store.stat(&key).await.unwrap().unwrap().change_token, first.change_token);
    let handle = store.open(&key, Access::Write).await.unwrap();
    handle.append(&[message(1, "b")]).await.unwrap();
    handle.close().await.unwrap();
    assert_ne!(store.stat(&key).await.unwrap().unwrap().change_token, first.change_token);
}

#[tokio::test]
async fn list_reads_headers_in_id_order_with_filters_and_cursor() {
    let root = tempfile::tempdir().unwrap();
    let backend = backend(root.path());
    let store = store(&backend);
    for id in ["c", "a", "b", ".d", "e"] {
        let mut header = header("t", id);
        if id == "b" {
            header.scope.user = berth_core::UserId::parse("other").unwrap();
        }
        let handle = store.create(header).await.unwrap();
        handle.flush().await.unwrap();
        handle.close().await.unwrap();
    }
    store.create(header("t2", "z")).await.unwrap().flush().await.unwrap();
    // A directory without a log (a creation that never published) is not a session.
    std::fs::create_dir_all(backend.session_dir(&key("t", "ghost"))).unwrap();
    // A damaged header is skipped, not fatal to the listing.
    store.create(header("t", "f")).await.unwrap().close().await.unwrap();
    let damaged = store.create(header("t", "g")).await.unwrap();
    damaged.flush().await.unwrap();
    damaged.close().await.unwrap();
    std::fs::write(backend.log_path(&key("t", "g")), b"not a header\n").unwrap();
    let fresh = store_of(root.path());
    let ids =
        |page: &berth_store::ListPage| page.items.iter().map(|item| item.header.id.to_string()).collect::<Vec<_>>();
    let page = fresh.list(&ListQuery::tenant(berth_core::TenantId::parse("t").unwrap())).await.unwrap();
    assert_eq!(ids(&page), [".d", "a", "b", "c", "e"]);
    let mut query = ListQuery::tenant(berth_core::TenantId::parse("t").unwrap());
    query.limit = 2;
    query.user = Some(berth_core::UserId::parse("u").unwrap());
    let page = fresh.list(&query).await.unwrap();
    assert_eq!(ids(&page), [".d", "a"]);
    query.after = page.next_cursor.clone();
    assert_eq!(ids(&fresh.list(&query).await.unwrap()), ["c", "e"]);
}

fn store_of(root: &std::path::Path) -> berth_store::LogStore {
    store(&backend(root))
}

#[tokio::test]
async fn erase_removes_the_session_and_refuses_while_a_writer_holds_it() {
    let root = tempfile::tempdir().unwrap();
    let backend = backend(root.path());
    let store = store(&backend);
    let key = key("t", "s");
    let handle = store.create(header("t", "s")).await.unwrap();
    handle.append(&[message(0, "a")]).await.unwrap();
    let error = backend.erase(&key).await.unwrap_err();
    assert!(matches!(error, Error::AlreadyOwned { .. }), "{error}");
    handle.close().await.unwrap();
    assert!(backend.erase(&key).await.unwrap());
    assert!(!backend.session_dir(&key).exists());
    assert!(store.stat(&key).await.unwrap().is_none());
    assert!(!backend.erase(&key).await.unwrap());
    // The id can be created again, from epoch 1.
    let handle = store.create(header("t", "s")).await.unwrap();
    handle.flush().await.unwrap();
    handle.close().await.unwrap();
    let writer = backend.open_jsonl_writer(&key).await.unwrap();
    assert_eq!(writer.epoch(), Epoch(2));
}

#[tokio::test]
async fn fsck_reports_every_kind_and_repairs_only_torn_tails() {
    let root = tempfile::tempdir().unwrap();
    let backend = backend(root.path());
    let store = store(&backend);
    for id in ["clean", "corrupt", "newer", "torn"] {
        let handle = store.create(header("t", id)).await.unwrap();
        handle.append(&[message(0, "a"), message(1, "b"), message(2, "c")]).await.unwrap();
        handle.close().await.unwrap();
    }
    let path = |id: &str| backend.log_path(&key("t", id));
    let mut torn = std::fs::read(path("torn")).unwrap();
    let committed = torn.len() as u64;
    torn.extend_from_slice(b"{\"seq\":3,\"ty");
    std::fs::write(path("torn"), &torn).unwrap();
    let mut corrupt = std::fs::read(path("corrupt")).unwrap();
    let second_line = corrupt.iter().position(|byte| *byte == b'\n').unwrap() + 10;
    corrupt[second_line] ^= 0x01;
    std::fs::write(path("corrupt"), &corrupt).unwrap();
    let newer = std::fs::read_to_string(path("newer")).unwrap().replacen(
        &format!("\"version\":{SESSION_FORMAT_VERSION}"),
        "\"version\":9",
        1,
    );
    std::fs::write(path("newer"), &newer).unwrap();

    let reports = fsck::check_root(root.path()).unwrap();
    let statuses: Vec<(String, SessionStatus)> =
        reports.into_iter().map(|report| (report.key.id.to_string(), report.status)).collect();
    assert_eq!(statuses[0], ("clean".to_owned(), SessionStatus::Ok { events: 3 }));
    assert!(
        matches!(&statuses[1].1, SessionStatus::Corrupt { location, .. } if location.seq == Some(0)),
        "{statuses:?}"
    );
    assert!(matches!(&statuses[2].1, SessionStatus::Unsupported { reason } if reason.contains("newer berth")));
    assert_eq!(statuses[3].1, SessionStatus::TornTail { events: 3, committed_len: committed, torn_bytes: 12 });

    let repaired = fsck::repair_torn_tail(&backend, &key("t", "torn")).await.unwrap().unwrap();
    assert_eq!(repaired.torn_bytes, 12);
    let kept = repaired.kept_copy.unwrap();
    assert!(kept.starts_with(BROKEN_PREFIX));
    assert_eq!(std::fs::read(backend.session_dir(&key("t", "torn")).join(kept)).unwrap(), b"{\"seq\":3,\"ty");
    assert_eq!(std::fs::metadata(path("torn")).unwrap().len(), committed);
    assert_eq!(fsck::repair_torn_tail(&backend, &key("t", "clean")).await.unwrap(), None);
    assert_eq!(fsck::repair_torn_tail(&backend, &key("t", "corrupt")).await.unwrap_err().code(), "corrupt");
    assert_eq!(std::fs::read(path("corrupt")).unwrap(), corrupt, "corrupt logs are never modified");
    let again = fsck::check_root(root.path()).unwrap();
    assert_eq!(again[3].status, SessionStatus::Ok { events: 3 });
}

/// Reliability plan §1 rule 7: the embedded backend assumes a local disk. `statfs`
/// magic numbers of network file systems are recognised (berth warns at open when its
/// data root is on one); a local root is not one.
#[test]
fn network_file_systems_are_recognised_and_a_local_root_is_not_one() {
    use berth_jsonl::fs::network_filesystem_name;
    for (magic, name) in [(0x6969, "NFS"), (0xFF53_4D42, "CIFS"), (0xFE53_4D42, "SMB2"), (0x0102_1997, "9P")] {
        assert_eq!(network_filesystem_name(magic), Some(name));
    }
    for local in
        [0xEF53 /* ext4 */, 0x0102_1994 /* tmpfs */, 0x5846_5342 /* xfs */, 0x9123_683E /* btrfs */]
    {
        assert_eq!(network_filesystem_name(local), None);
    }
    let root = tempfile::tempdir().unwrap();
    assert_eq!(backend(root.path()).network_filesystem(), None, "the test machine's temp dir is local");
}

/// Every file under `dir` with its length and bytes, to show nothing outside the root
/// was created, written or removed.
fn snapshot(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                files.push((path.clone(), Vec::new()));
                pending.push(path);
            } else {
                files.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
    }
    files.sort();
    files
}

/// Where a test plants its symlink, given the backend.
type PlantedAt = Box<dyn Fn(&JsonlBackend) -> std::path::PathBuf>;

/// Reliability §6 test 35 (symlink case): a symlink planted at the `tenants` directory,
/// a tenant's directory, its `sessions` directory, a session's directory, its log or its
/// lock file, pointing outside the root, is refused by every operation (create, open for
/// reading and writing, stat, list, erase); nothing outside the root is created, read
/// into a reply or changed. Below the backend's own checks, the real file system's opens
/// refuse a symlink in any component (`openat2` `RESOLVE_NO_SYMLINKS`).
#[tokio::test]
async fn t35_symlinks_planted_anywhere_under_the_root_touch_nothing_outside() {
    let elsewhere = tempfile::tempdir().unwrap();
    // A real tenant tree outside, holding a valid session "s" of tenant "t": what a
    // followed symlink would serve or overwrite.
    let outside_root = elsewhere.path().join("outside-root");
    {
        let outside_backend = backend(&outside_root);
        let handle = store(&outside_backend).create(header("t", "s")).await.unwrap();
        handle.append(&[message(0, "outside secret")]).await.unwrap();
        handle.close().await.unwrap();
    }
    let outside_tenants = outside_root.join("tenants");
    let outside_tenant = outside_tenants.join("t");
    let outside_sessions = outside_tenant.join("sessions");
    let outside_session = outside_sessions.join("s");
    let plants: [(&str, PlantedAt, std::path::PathBuf); 6] = [
        ("tenants", Box::new(|b: &JsonlBackend| b.root().join("tenants")), outside_tenants.clone()),
        ("tenant", Box::new(|b: &JsonlBackend| b.root().join("tenants/t")), outside_tenant.clone()),
        ("sessions", Box::new(|b: &JsonlBackend| b.root().join("tenants/t/sessions")), outside_sessions.clone()),
        ("session", Box::new(|b: &JsonlBackend| b.session_dir(&key("t", "s"))), outside_session.clone()),
        ("log", Box::new(|b: &JsonlBackend| b.log_path(&key("t", "s"))), outside_session.join("session.jsonl")),
        (
            "lock",
            Box::new(|b: &JsonlBackend| b.session_dir(&key("t", "s")).join("session.lock")),
            elsewhere.path().join("planted.lock"),
        ),
    ];
    for (name, planted_at, target) in plants {
        let root = tempfile::tempdir().unwrap();
        let backend = backend(root.path());
        let store = store(&backend);
        // The tree down to the plant exists for real (so the plant replaces a real entry).
        let handle = store.create(header("t", "s")).await.unwrap();
        handle.append(&[message(0, "inside")]).await.unwrap();
        handle.close().await.unwrap();
        let at = planted_at(&backend);
        if at.is_dir() {
            std::fs::remove_dir_all(&at).unwrap();
        } else {
            std::fs::remove_file(&at).unwrap();
        }
        std::os::unix::fs::symlink(&target, &at).unwrap();
        let before = snapshot(elsewhere.path());
        let key = key("t", "s");

        // Readers never touch the lock file: with only the lock planted, a read of the
        // (real, inside) log is fine; every other plant is on the read path.
        let lock_only = name == "lock";
        let opened = store.open(&key, Access::Read).await;
        assert!(opened.is_err() != lock_only, "{name}: a read through the symlink is refused: {:?}", opened.err());
        let written = store.open(&key, Access::Write).await;
        assert!(written.is_err(), "{name}: a write open through the symlink is refused");
        match store.stat(&key).await {
            Err(error) => assert_eq!(error.code(), "corrupt", "{name}: {error}"),
            Ok(found) => assert!(lock_only && found.is_some(), "{name}: stat reads nothing outside: {found:?}"),
        }
        let listed = backend.list_blocking(&ListQuery::tenant(berth_core::TenantId::parse("t").unwrap()));
        assert!(
            listed.as_ref().map_or(true, |items| items.iter().all(|item| item.header.id.as_str() != "s" || lock_only)),
            "{name}: listing serves nothing outside: {listed:?}"
        );
        let created = store.create(header("t", "fresh")).await;
        if matches!(name, "session" | "log" | "lock") {
            // Another session of the tenant is not behind the symlink: created inside.
            let handle = created.unwrap_or_else(|error| panic!("{name}: {error}"));
            handle.close().await.unwrap();
            assert!(backend
                .session_dir(&jsonl_common::key("t", "fresh"))
                .starts_with(root.path().canonicalize().unwrap()));
        } else {
            assert!(created.is_err(), "{name}: a create through the symlink is refused");
        }
        let erased = backend.erase(&key).await;
        // Erasing a session whose log (or lock) entry is a symlink may remove that entry,
        // inside the root; it never reaches the target (the snapshot below).
        assert!(
            erased.is_err() || matches!(name, "log" | "lock"),
            "{name}: an erase through the symlink is refused: {erased:?}"
        );
        assert_eq!(snapshot(elsewhere.path()), before, "{name}: nothing outside the root was created or changed");
        assert!(!elsewhere.path().join("planted.lock").exists(), "{name}: no file created outside");
    }

    // The kernel's refusal, without the backend's checks: an open whose path crosses a
    // symlink in a middle component fails with ELOOP, and creates nothing.
    use berth_jsonl::fs::{Fs, OpenOptions, OsFs};
    let root = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), root.path().join("link")).unwrap();
    let through = root.path().join("link").join("created-through-a-symlink");
    let refused = OsFs.open(&through, OpenOptions::write_new()).err().expect("refused");
    assert_eq!(refused.raw_os_error(), Some(libc::ELOOP), "{refused}");
    assert!(!elsewhere.path().join("created-through-a-symlink").exists());
    std::fs::create_dir(elsewhere.path().join("a-directory")).unwrap();
    let refused = OsFs.open_dir(&root.path().join("link").join("a-directory")).err().expect("refused");
    assert_eq!(refused.raw_os_error(), Some(libc::ELOOP), "{refused}");
}
