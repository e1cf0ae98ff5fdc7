//! `berth serve` on PostgreSQL refuses a database role that row-level security does not
//! bind (reliability §6 test 33's self-check, end to end): as the superuser it exits with
//! the reason and the development flag's name; as the app role it serves; with
//! `--dev-allow-db-owner` the superuser serves, with a warning. `berth migrate
//! --app-role` grants an existing role what serving needs.

mod common;

use berth::postgres::testing::{connect, TestDatabase, TestServer};
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn serve(url: &str, keys: &std::path::Path, extra: &[&str]) -> Command {
    let mut command = common::berth(std::path::Path::new(url));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--sweep-interval-s", "0", "--keys-file"])
        .arg(keys)
        .args(extra)
        .env("BERTH_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Starts the server and waits for its "listening" line; returns the child and stderr.
fn started(mut command: Command) -> (common::Server, std::process::ChildStderr) {
    let mut child = command.spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let stderr = child.stderr.take().unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("listening on"), "{line:?}");
    std::thread::spawn(move || for _ in stdout.lines() {});
    (common::Server(child), stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_a_role_row_level_security_does_not_bind_unless_told_it_is_development() {
    let database = TestDatabase::with_app_role().await;
    let scratch = tempfile::tempdir().unwrap();
    let keys = scratch.path().join("keys.sqlite");

    // The superuser is refused at start-up, with the reason and the way out.
    let mut refused = serve(&database.url(), &keys, &[]).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = refused.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "berth serve as the superuser did not exit");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    refused.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("superuser") && stderr.contains("--dev-allow-db-owner"), "{stderr}");

    // The app role serves.
    let (server, _) = started(serve(&database.app_url(), &keys, &[]));
    drop(server);

    // The development flag lets the superuser serve, loudly.
    let (server, mut stderr) = started(serve(&database.url(), &keys, &["--dev-allow-db-owner"]));
    drop(server);
    let mut warning = String::new();
    stderr.read_to_string(&mut warning).unwrap();
    assert!(warning.contains("WARNING") && warning.contains("superuser"), "{warning}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_app_role_grants_what_serving_needs() {
    let database = TestDatabase::create().await;
    let owner = database.client().await;
    let role = format!("berth_test_app_{}", database.name().trim_start_matches("berth_test_"));
    owner.batch_execute(&format!("CREATE ROLE {role} LOGIN PASSWORD 'p'")).await.unwrap();
    let output =
        common::berth(std::path::Path::new(&database.url())).args(["migrate", "--app-role", &role]).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let app_url = TestServer { user: role.clone(), password: Some("p".into()), ..database.server().clone() }
        .url(database.name(), None);
    let app = connect(&app_url).await;
    app.batch_execute("BEGIN; SET LOCAL berth.tenant = 't'").await.unwrap();
    let sessions: i64 = app.query_one("SELECT count(*) FROM sessions", &[]).await.unwrap().get(0);
    assert_eq!(sessions, 0);
    app.batch_execute("INSERT INTO tenants (tenant) VALUES ('t'); ROLLBACK").await.unwrap();
    let ddl = app.batch_execute("ALTER TABLE sessions DISABLE ROW LEVEL SECURITY").await;
    assert!(ddl.is_err(), "the app role owns nothing: it cannot disable a policy");
    drop(app);
    owner.batch_execute(&format!("REASSIGN OWNED BY {role} TO CURRENT_USER; DROP OWNED BY {role}")).await.unwrap();
    drop(owner);
    // The role goes with the database (the harness drops roles named after it).
    let admin = connect(&database.server().url(&database.server().admin_database, None)).await;
    drop(database);
    admin.batch_execute(&format!("DROP ROLE IF EXISTS {role}")).await.unwrap();
}
