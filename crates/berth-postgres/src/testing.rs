//! Test support shared by this crate's tests and the test kit's PostgreSQL runners: a
//! throw-away database per fixture, and a TCP proxy that severs or black-holes
//! connections on demand. Not for production use.
//!
//! The server comes from `BERTH_TEST_PG` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`). Every [`TestDatabase`] is a new
//! database named `berth_test_<pid>_<random>`, dropped (`WITH (FORCE)`) when the value
//! is dropped; databases left behind by a killed test process (whose pid is gone) are
//! dropped by the next run.

pub use tokio_postgres;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The environment variable naming the test server.
pub const TEST_SERVER_ENV: &str = "BERTH_TEST_PG";
pub const TEST_SERVER_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const NAME_PREFIX: &str = "berth_test_";
/// Prefix of the per-database app roles (roles are cluster-wide: each is unique, and
/// dropped with its database).
const ROLE_PREFIX: &str = "berth_test_app_";

/// Where the test server is, as parts (so URLs to other databases and through a proxy
/// can be built).
#[derive(Clone, Debug)]
pub struct TestServer {
    pub user: String,
    pub password: Option<String>,
    pub host: String,
    pub port: u16,
    pub admin_database: String,
}

impl TestServer {
    pub fn from_env() -> TestServer {
        let url = std::env::var(TEST_SERVER_ENV).unwrap_or_else(|_| TEST_SERVER_DEFAULT.to_owned());
        let config: tokio_postgres::Config =
            url.parse().unwrap_or_else(|error| panic!("{TEST_SERVER_ENV}={url}: {error}"));
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
            _ => "127.0.0.1".to_owned(),
        };
        TestServer {
            user: config.get_user().unwrap_or("postgres").to_owned(),
            password: config.get_password().map(|password| String::from_utf8_lossy(password).into_owned()),
            host,
            port: config.get_ports().first().copied().unwrap_or(5432),
            admin_database: config.get_dbname().unwrap_or("postgres").to_owned(),
        }
    }

    /// A URL to `database` on this server, or through a proxy at `via`.
    pub fn url(&self, database: &str, via: Option<SocketAddr>) -> String {
        let credentials = match &self.password {
            Some(password) => format!("{}:{password}", self.user),
            None => self.user.clone(),
        };
        let (host, port) = match via {
            Some(address) => (address.ip().to_string(), address.port()),
            None => (self.host.clone(), self.port),
        };
        format!("postgres://{credentials}@{host}:{port}/{database}")
    }

    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Connects a plain client (its connection driven by a spawned task).
pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|error| panic!("connect {url}: {error:?}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

fn pid_is_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// A database of its own for one test fixture, dropped with the value.
#[derive(Debug)]
pub struct TestDatabase {
    server: TestServer,
    name: String,
    /// The serving role of [`TestDatabase::with_app_role`]: name and password.
    app_role: Option<(String, String)>,
}

impl TestDatabase {
    pub async fn create() -> TestDatabase {
        let server = TestServer::from_env();
        let admin = connect(&server.url(&server.admin_database, None)).await;
        drop_orphans(&admin).await;
        let name = format!("{NAME_PREFIX}{}_{}", std::process::id(), uuid::Uuid::now_v7().simple());
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|error| panic!("create {name}: {error}"));
        TestDatabase { server, name, app_role: None }
    }

    /// A database migrated by the test server's role (the owner), plus a unique login
    /// role for serving, as production runs it: no superuser, no `BYPASSRLS`, owns
    /// nothing, granted what `berth migrate --app-role` grants. [`TestDatabase::app_url`]
    /// connects as it, so row-level security binds every statement. The role is dropped
    /// with the database.
    pub async fn with_app_role() -> TestDatabase {
        let mut database = TestDatabase::create().await;
        let suffix = database.name.strip_prefix(NAME_PREFIX).unwrap_or_default().to_owned();
        let role = format!("{ROLE_PREFIX}{suffix}");
        let password = uuid::Uuid::now_v7().simple().to_string();
        let admin = connect(&database.server.url(&database.server.admin_database, None)).await;
        admin
            .batch_execute(&format!(
                "CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE PASSWORD '{password}'"
            ))
            .await
            .unwrap_or_else(|error| panic!("create role {role}: {error}"));
        database.app_role = Some((role.clone(), password));
        let mut owner = database.client().await;
        crate::schema::migrate(&mut owner).await.unwrap_or_else(|failure| panic!("migrate: {failure:?}"));
        crate::schema::grant_app_role(&owner, &role).await.unwrap_or_else(|failure| panic!("grant: {failure:?}"));
        database
    }

    /// The app role's name (only for [`TestDatabase::with_app_role`]).
    pub fn app_role(&self) -> &str {
        self.app_role.as_ref().map(|(role, _)| role.as_str()).expect("a database made with_app_role")
    }

    /// A URL to this database as its app role (only for [`TestDatabase::with_app_role`]).
    pub fn app_url(&self) -> String {
        self.app_url_via(None)
    }

    /// The app role's URL, directly or through a proxy at `via`.
    pub fn app_url_via(&self, via: Option<SocketAddr>) -> String {
        let (role, password) = self.app_role.as_ref().expect("a database made with_app_role");
        let server = TestServer { user: role.clone(), password: Some(password.clone()), ..self.server.clone() };
        server.url(&self.name, via)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn server(&self) -> &TestServer {
        &self.server
    }

    pub fn url(&self) -> String {
        self.server.url(&self.name, None)
    }

    /// A URL to this database through a proxy.
    pub fn url_via(&self, proxy: &Proxy) -> String {
        self.server.url(&self.name, Some(proxy.address()))
    }

    /// A plain client on this database (for assertions and fault injection).
    pub async fn client(&self) -> tokio_postgres::Client {
        connect(&self.url()).await
    }
}

/// How old a left-behind database must be before another run drops it: the pid check
/// alone could be fooled by a test process in another pid namespace sharing the server.
const ORPHAN_AGE_MIN: Duration = Duration::from_secs(3_600);

/// Drops databases left behind by test processes that no longer exist (killed before
/// their drop ran), once they are old enough. The name carries the pid and a UUIDv7,
/// whose first 48 bits are its creation time in milliseconds.
async fn drop_orphans(admin: &tokio_postgres::Client) {
    let Ok(rows) = admin.query("SELECT datname FROM pg_database WHERE datname LIKE 'berth\\_test\\_%'", &[]).await
    else {
        return;
    };
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_millis() as u64);
    for row in rows {
        let name: String = row.get(0);
        let mut parts = name.strip_prefix(NAME_PREFIX).unwrap_or_default().split('_');
        let pid: Option<u32> = parts.next().and_then(|pid| pid.parse().ok());
        let created_ms = parts.next().and_then(|uuid| uuid.get(..12)).and_then(|hex| u64::from_str_radix(hex, 16).ok());
        let (Some(pid), Some(created_ms)) = (pid, created_ms) else { continue };
        let old_enough = now_ms.saturating_sub(created_ms) > ORPHAN_AGE_MIN.as_millis() as u64;
        if old_enough && !pid_is_alive(pid) {
            let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
        }
    }
    // Roles whose database is gone (its drop ran, but the role's did not): the app role
    // `berth_test_app_<suffix>` and tests' scratch roles `berth_test_app_<suffix>_<tag>`.
    let Ok(rows) = admin
        .query(
            "SELECT rolname FROM pg_roles WHERE rolname LIKE 'berth\\_test\\_app\\_%' \
             AND NOT EXISTS (SELECT 1 FROM pg_database WHERE datname LIKE 'berth\\_test\\_%' \
                 AND (rolname = 'berth_test_app_' || substr(datname, 12) \
                      OR rolname LIKE 'berth\\_test\\_app\\_' || substr(datname, 12) || '\\__'))",
            &[],
        )
        .await
    else {
        return;
    };
    for row in rows {
        let role: String = row.get(0);
        let _ = admin.batch_execute(&format!("DROP ROLE IF EXISTS {role}")).await;
    }
}

impl Drop for TestDatabase {
    /// Drops the database `WITH (FORCE)`, on a thread of its own (the drop may run
    /// inside or outside any runtime), waiting at most `DROP_WAIT_MAX`: a backend that
    /// cannot exit (stopped by a failed test) must not hang the test run; such a
    /// database is left to the next run's orphan sweep.
    fn drop(&mut self) {
        let (url, name) = (self.server.url(&self.server.admin_database, None), self.name.clone());
        let role = self.app_role.as_ref().map(|(role, _)| role.clone());
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let dropped = tokio::runtime::Builder::new_current_thread().enable_all().build().ok().and_then(|runtime| {
                runtime.block_on(async {
                    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.ok()?;
                    tokio::spawn(async move {
                        let _ = connection.await;
                    });
                    client.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await.ok()?;
                    // The role's privileges lived in the dropped database: nothing holds it.
                    if let Some(role) = role {
                        client.batch_execute(&format!("DROP ROLE IF EXISTS {role}")).await.ok()?;
                    }
                    Some(())
                })
            });
            let _ = done.send(dropped.is_some());
        });
        if !matches!(finished.recv_timeout(DROP_WAIT_MAX), Ok(true)) {
            eprintln!("warning: test database {} was not dropped", self.name);
        }
    }
}

const DROP_WAIT_MAX: Duration = Duration::from_secs(30);

/// What a proxied connection does with the bytes of one direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Flow {
    Forward = 0,
    /// Keep the sockets open and forward nothing (a half-open or partitioned link).
    Blackhole = 1,
}

/// What the proxy does with new connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Admission {
    Forward = 0,
    /// Accept, then black-hole both directions.
    Blackhole = 1,
    /// Accept and close at once (a server that is down).
    Refuse = 2,
}

struct Link {
    client_to_server: AtomicU8,
    server_to_client: AtomicU8,
    severed: tokio::sync::Notify,
}

/// A tiny TCP proxy on 127.0.0.1 between a client and the test server.
pub struct Proxy {
    address: SocketAddr,
    admission: Arc<AtomicU8>,
    links: Arc<Mutex<Vec<Arc<Link>>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let address = listener.local_addr().expect("proxy address");
        let admission = Arc::new(AtomicU8::new(Admission::Forward as u8));
        let links: Arc<Mutex<Vec<Arc<Link>>>> = Arc::default();
        let accept = tokio::spawn(accept_loop(listener, upstream, admission.clone(), links.clone()));
        Proxy { address, admission, links, accept }
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn admit(&self, admission: Admission) {
        self.admission.store(admission as u8, Ordering::SeqCst);
    }

    /// Changes the flow of every connection open now.
    pub fn set_flow(&self, client_to_server: Flow, server_to_client: Flow) {
        for link in self.links.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).iter() {
            link.client_to_server.store(client_to_server as u8, Ordering::SeqCst);
            link.server_to_client.store(server_to_client as u8, Ordering::SeqCst);
        }
    }

    /// Closes both sockets of every connection open now.
    pub fn sever(&self) {
        let links = std::mem::take(&mut *self.links.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
        for link in links {
            link.severed.notify_one();
        }
    }

    pub fn connections(&self) -> usize {
        self.links.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).len()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.sever();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: String,
    admission: Arc<AtomicU8>,
    links: Arc<Mutex<Vec<Arc<Link>>>>,
) {
    while let Ok((client, _)) = listener.accept().await {
        let admitted = admission.load(Ordering::SeqCst);
        if admitted == Admission::Refuse as u8 {
            drop(client);
            continue;
        }
        let Ok(server) = TcpStream::connect(&upstream).await else { continue };
        let flow = if admitted == Admission::Blackhole as u8 { Flow::Blackhole } else { Flow::Forward } as u8;
        let link = Arc::new(Link {
            client_to_server: AtomicU8::new(flow),
            server_to_client: AtomicU8::new(flow),
            severed: tokio::sync::Notify::new(),
        });
        links.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(link.clone());
        tokio::spawn(relay(client, server, link));
    }
}

async fn relay(client: TcpStream, server: TcpStream, link: Arc<Link>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = pump(&mut client_read, &mut server_write, &link.client_to_server);
    let downstream = pump(&mut server_read, &mut client_write, &link.server_to_client);
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
        _ = link.severed.notified() => {}
    }
    // Dropping the halves closes both sockets.
}

async fn pump(from: &mut (impl AsyncReadExt + Unpin), to: &mut (impl AsyncWriteExt + Unpin), flow: &AtomicU8) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        if flow.load(Ordering::SeqCst) == Flow::Forward as u8 && to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}
