//! Memory quotas end to end: `berth serve --memory-items-max/--memory-bytes-max` set the
//! default, an admin sets a tenant's own with `berth memory quota` (through the server),
//! and a put past either is the documented refusal (422 `limit_exceeded`, exit 5) with
//! nothing stored.

mod common;

use common::{berth, start_server_with};
use std::path::Path;
use std::process::Output;

fn remote(data: &Path, url: &str, key: &str, args: &[&str]) -> Output {
    berth(data).arg("--server").arg(url).arg("--json").args(args).env("BERTH_API_KEY", key).output().unwrap()
}

fn ok_json(output: &Output) -> serde_json::Value {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

fn refusal(output: &Output) -> (Option<i32>, serde_json::Value) {
    (output.status.code(), serde_json::from_slice(&output.stderr).unwrap_or_default())
}

#[test]
fn serve_takes_the_default_an_admin_sets_a_tenants_own_and_a_put_past_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (_server, url, admin) = start_server_with(&data, &["--memory-items-max", "2", "--memory-bytes-max", "1000000"]);
    let service = {
        let created = berth(&data)
            .args(["keys", "create", "--tenant", "default", "--user", "svc", "--role", "service"])
            .output()
            .unwrap();
        assert!(created.status.success());
        String::from_utf8(created.stdout).unwrap().trim().to_owned()
    };
    let usage = ok_json(&remote(&data, &url, &service, &["memory", "usage"]));
    assert_eq!((usage["quota_items"].as_u64(), usage["quota_bytes"].as_u64()), (Some(2), Some(1_000_000)));
    let put = |key: &str, value: &str| remote(&data, &url, &service, &["memory", "put", "app/notes", key, value]);
    ok_json(&put("a", "1"));
    ok_json(&put("b", "1"));
    let (code, error) = refusal(&put("c", "1"));
    assert_eq!(code, Some(5), "{error}");
    assert_eq!(
        (error["error"]["code"].as_str(), error["error"]["retryable"].as_bool()),
        (Some("limit_exceeded"), Some(false))
    );
    assert!(error["error"]["message"].as_str().unwrap().contains("memory_items"), "{error}");
    let (code, _) = refusal(&remote(&data, &url, &service, &["memory", "get", "app/notes", "c"]));
    assert_eq!(code, Some(3), "nothing stored");

    // Only an admin sets the tenant's own quota.
    let (code, error) = refusal(&remote(&data, &url, &service, &["memory", "quota", "--items", "9"]));
    assert_eq!((code, error["error"]["code"].as_str()), (Some(5), Some("forbidden")));
    let usage = ok_json(&remote(&data, &url, &admin, &["memory", "quota", "--items", "3", "--bytes", "40"]));
    assert_eq!(
        (usage["items"].as_u64(), usage["quota_items"].as_u64(), usage["quota_bytes"].as_u64()),
        (Some(2), Some(3), Some(40))
    );
    ok_json(&put("c", "1"));
    let (code, _) = refusal(&put("d", "1"));
    assert_eq!(code, Some(5), "at 3 items");
    let (code, error) = refusal(&put("a", "\"well over forty bytes with this value\""));
    assert_eq!(code, Some(5));
    assert!(error["error"]["message"].as_str().unwrap().contains("memory_bytes"), "{error}");
    let kept = ok_json(&remote(&data, &url, &service, &["memory", "get", "app/notes", "a"]));
    assert_eq!(kept["value"], 1, "the refused replacement stored nothing");

    // No limits given: the server's defaults again (2 items: a fourth stays refused).
    let usage = ok_json(&remote(&data, &url, &admin, &["memory", "quota"]));
    assert_eq!((usage["quota_items"].as_u64(), usage["quota_bytes"].as_u64()), (Some(2), Some(1_000_000)));
    let (code, _) = refusal(&put("d", "1"));
    assert_eq!(code, Some(5));

    // On the data directory (an operator's admin principal), the same stored quota: the
    // server reads it with each put.
    let local = berth(&data)
        .args(["--json", "memory", "quota", "--items", "4"])
        .env("BERTH_TENANT", "default")
        .output()
        .unwrap();
    assert_eq!(ok_json(&local)["quota_items"], 4);
    ok_json(&put("d", "1"));
}
