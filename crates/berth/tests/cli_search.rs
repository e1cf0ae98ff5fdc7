//! Issue 55 item 4, the CLI: `berth sessions ls --search TEXT` lists the sessions whose
//! id, title or a label holds TEXT, ignoring case, with `%` and `_` matched literally;
//! on a data directory and through a server alike. A search the listing refuses is a
//! usage error naming `--search`.

mod common;

use common::{as_alice, berth, start_server, stdout_ok as ok};
use std::path::Path;

fn seeded(data: &Path) {
    for (id, title, label) in
        [("pct", "Refund 50% off", "billing"), ("nopct", "refund 500 off", "a_b"), ("other", "Shipping", "axb")]
    {
        ok(as_alice(data, &["sessions", "new", "--id", id, "--title", title, "--label", label]));
    }
}

/// The ids listed, in order.
fn ids(listed: &str) -> Vec<&str> {
    listed.lines().filter(|line| !line.starts_with('#')).map(|line| line.split(' ').next().unwrap()).collect()
}

fn check(ls: impl Fn(&[&str]) -> String) {
    assert_eq!(ids(&ls(&["50%"])), ["pct"], "% is literal");
    let refunds = ls(&["REFUND"]);
    let mut found = ids(&refunds);
    found.sort();
    assert_eq!(found, ["nopct", "pct"], "case is ignored");
    assert_eq!(ids(&ls(&["a_b"])), ["nopct"], "labels, _ literal");
    assert_eq!(ids(&ls(&["OTH"])), ["other"], "ids");
    assert!(ids(&ls(&["nothing like it"])).is_empty());
}

#[test]
fn sessions_ls_search_on_a_data_directory_and_through_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    seeded(&data);
    check(|search| ok(as_alice(&data, &[&["sessions", "ls", "--all", "--search"], search].concat())));
    let (_server, url, _admin) = start_server(&data);
    let key = ok(berth(&data)
        .args(["keys", "create", "--tenant", "acme", "--user", "alice", "--role", "user"])
        .output()
        .unwrap());
    check(|search| {
        ok(berth(&data)
            .arg("--server")
            .arg(&url)
            .args(["sessions", "ls", "--all", "--search"])
            .args(search)
            .env("BERTH_API_KEY", key.trim())
            .output()
            .unwrap())
    });
    let json = ok(as_alice(&data, &["--json", "sessions", "ls", "--all", "--search", "50%"]));
    let page: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(page["items"][0]["header"]["id"], "pct");
}

#[test]
fn a_search_the_listing_refuses_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    seeded(&data);
    for bad in ["x".repeat(257), "a\tb".to_owned(), String::new()] {
        let refused = as_alice(&data, &["sessions", "ls", "--search", &bad]);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{bad:?}: {stderr}");
        assert!(stderr.contains("--search"), "{bad:?}: {stderr}");
    }
}
