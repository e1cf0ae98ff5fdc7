//! `berth._native`: the embedded transport of berth's Python package (`berth-store`). It opens a store
//! from a URL (a data directory, `postgres://…`, `memory:`) with the Rust library, in
//! the Python process, and answers the `/v1` routes through the server's own router
//! without a socket (`berth_server::in_process`): the request and response bodies, the
//! errors and their classes are byte for byte those of `berth serve`, so the Python
//! client has one decoding path for both transports.
//!
//! Every call releases the GIL while the store works. An asyncio caller submits instead
//! (`Embedded.submit`): the request runs as a task on the store's runtime and its answer
//! is posted to a `Mailbox` whose eventfd the caller's event loop watches, so neither a
//! worker thread of Python's nor the GIL is taken on the way. The tokio runtime belongs to the
//! process that opened the store: after `fork` a child holds a copy of it whose threads
//! do not exist, so every method checks the process id, and a dropped copy in a child
//! is leaked rather than shut down (see `Embedded::drop`).

use axum::body::{Body, BodyDataStream};
use axum::http::{HeaderName, HeaderValue, Method, Request};
use berth_core::{ProjectId, TenantId, UserId};
use berth_server::in_process::InProcessServer;
use berth_server::ServerConfig;
use berth_service::{Principal, Role};
use futures_util::StreamExt;
use http_body_util::BodyExt;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

create_exception!(
    berth_native,
    BerthError,
    PyException,
    "An error answer: args are (http_status, error_body_json_bytes)."
);
create_exception!(
    berth_native,
    ForkedError,
    PyException,
    "This store was opened by the parent process of a fork; open it again in the child."
);
create_exception!(berth_native, ClosedError, PyException, "The store was closed.");

type Headers = Vec<(String, String)>;

/// A submitted request's answer, or why there is none.
type Answered = Result<(u16, Headers, axum::body::Bytes), Failure>;

/// Why a submitted request has no answer.
enum Failure {
    /// The store closed (or its runtime went away) before the request finished.
    Closed,
    /// The answer's body could not be read.
    Body(String),
}

/// Where submitted requests' answers wait for the event loop that submitted them: the
/// answers, and an eventfd that is readable while any wait. One per event loop.
struct Mailbox {
    fd: libc::c_int,
    answers: Mutex<Vec<(u64, Answered)>>,
}

impl Mailbox {
    fn post(&self, token: u64, answered: Answered) {
        self.answers.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push((token, answered));
        // After the push: a drain that reads the counter first and the answers second
        // may take this answer early, leaving a wake-up with nothing to drain, but never
        // leaves an answer without a wake-up.
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to the eventfd this mailbox owns. It
        // fails only if the counter would overflow (2^64 - 2 wake-ups never drained).
        unsafe { libc::write(self.fd, (&one as *const u64).cast(), 8) };
    }
}

impl Drop for Mailbox {
    fn drop(&mut self) {
        // SAFETY: the descriptor is this mailbox's own and closed once, here.
        unsafe { libc::close(self.fd) };
    }
}

/// Posts `Failure::Closed` for a submitted request whose task is dropped before it
/// answered (the runtime shut down), so no caller waits forever.
struct Pending {
    mailbox: Arc<Mailbox>,
    token: u64,
    answered: bool,
}

impl Pending {
    fn answer(mut self, answered: Answered) {
        self.answered = true;
        self.mailbox.post(self.token, answered);
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.answered {
            self.mailbox.post(self.token, Err(Failure::Closed));
        }
    }
}

/// An event loop's mailbox, as Python holds it: `fd` to watch for reading, `drain()` when
/// it is readable.
#[pyclass(frozen, module = "berth._native")]
struct Completions {
    mailbox: Arc<Mailbox>,
}

/// One drained answer: `(token, status, headers, body, failure)`; `failure` is `None`, or
/// `"closed"` / `"body: …"` with status 0 and nothing else.
type Drained<'py> = (u64, u16, Headers, Bound<'py, PyBytes>, Option<String>);

#[pymethods]
impl Completions {
    #[new]
    fn new() -> PyResult<Completions> {
        // SAFETY: eventfd takes no pointers; a negative return is an error.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(PyRuntimeError::new_err(format!("eventfd: {}", std::io::Error::last_os_error())));
        }
        Ok(Completions { mailbox: Arc::new(Mailbox { fd, answers: Mutex::new(Vec::new()) }) })
    }

    /// The descriptor to watch: readable while answers wait.
    #[getter]
    fn fd(&self) -> i32 {
        self.mailbox.fd
    }

    /// Every answer that arrived, oldest first; resets the descriptor.
    fn drain<'py>(&self, py: Python<'py>) -> Vec<Drained<'py>> {
        let mut counter: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from the nonblocking eventfd this mailbox
        // owns (EAGAIN when nothing was posted: nothing to reset).
        unsafe { libc::read(self.mailbox.fd, (&mut counter as *mut u64).cast(), 8) };
        let answers =
            std::mem::take(&mut *self.mailbox.answers.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
        answers
            .into_iter()
            .map(|(token, answered)| match answered {
                Ok((status, headers, body)) => (token, status, headers, PyBytes::new(py, &body), None),
                Err(failure) => {
                    let failure = match failure {
                        Failure::Closed => "closed".to_owned(),
                        Failure::Body(message) => format!("body: {message}"),
                    };
                    (token, 0, Vec::new(), PyBytes::new(py, b""), Some(failure))
                }
            })
            .collect()
    }
}

/// What an open store holds; dropped only in the process that made it.
struct Opened {
    runtime: tokio::runtime::Runtime,
    server: Arc<InProcessServer>,
    closed: AtomicBool,
    /// One permit per submitted request holding a thread of the runtime's blocking pool.
    blocking_threads: Arc<tokio::sync::Semaphore>,
}

/// At most this many submitted requests hold a thread of the blocking pool at once;
/// more run as tasks on the runtime's workers. A request held there may itself need a
/// blocking thread (opening a log runs on the pool), so the submitted ones must never
/// take the whole pool (tokio's default: 512), or they would wait for each other.
const SUBMITTED_ON_BLOCKING_THREADS_MAX: usize = 64;

/// A validated principal, made once per client and passed with each request.
#[pyclass(frozen, module = "berth._native", name = "Principal")]
struct PyPrincipal(Principal);

#[pymethods]
impl PyPrincipal {
    #[new]
    #[pyo3(signature = (tenant, user, project=None, role="user"))]
    fn new(tenant: &str, user: &str, project: Option<&str>, role: &str) -> PyResult<PyPrincipal> {
        principal_of(tenant, user, project, role).map(PyPrincipal).map_err(|error| error_answer(&error))
    }
}

/// One open store; every request says which principal makes it.
#[pyclass(frozen, module = "berth._native")]
struct Embedded {
    pid: u32,
    root: Option<String>,
    opened: ManuallyDrop<Opened>,
}

fn principal_of(tenant: &str, user: &str, project: Option<&str>, role: &str) -> berth_core::Result<Principal> {
    Ok(Principal {
        tenant: TenantId::parse(tenant)?,
        user: UserId::parse(user)?,
        project: project.map(ProjectId::parse).transpose()?,
        role: Role::parse(role)?,
    })
}

/// A core error as the server would answer it: `BerthError(status, body)`.
fn error_answer(error: &berth_core::Error) -> PyErr {
    let status = berth_server::error::ApiError::from_core(error).status.as_u16();
    BerthError::new_err((status, serde_json_error_body(error)))
}

/// The server's error body for `error`, without a runtime (the body is built eagerly).
fn serde_json_error_body(error: &berth_core::Error) -> Vec<u8> {
    serde_json::to_vec(&berth_server::error::ApiError::from_core(error).body).unwrap_or_default()
}

fn build_request(method: &str, path: &str, headers: &Headers, body: Option<Vec<u8>>) -> PyResult<Request<Body>> {
    let method = Method::from_bytes(method.as_bytes()).map_err(|_| PyValueError::new_err("invalid HTTP method"))?;
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .body(body.map_or_else(Body::empty, Body::from))
        .map_err(|error| PyValueError::new_err(format!("invalid request: {error}")))?;
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| PyValueError::new_err("invalid header name"))?;
        let value = HeaderValue::from_str(value).map_err(|_| PyValueError::new_err("invalid header value"))?;
        request.headers_mut().append(name, value);
    }
    Ok(request)
}

/// `request` answered as `principal` through the server's router: the status, the
/// headers and the whole body (or why it could not be read).
async fn answer_of(
    server: &InProcessServer,
    principal: Principal,
    request: Request<Body>,
) -> (u16, Headers, Result<axum::body::Bytes, String>) {
    let response = server.call(principal, request).await;
    let status = response.status().as_u16();
    let headers = headers_of(&response);
    let body = response.into_body().collect().await.map(|collected| collected.to_bytes()).map_err(|e| e.to_string());
    (status, headers, body)
}

fn headers_of(response: &axum::response::Response) -> Headers {
    response
        .headers()
        .iter()
        .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
        .collect()
}

impl Embedded {
    fn check(&self) -> PyResult<&Opened> {
        if std::process::id() != self.pid {
            return Err(ForkedError::new_err("this store was opened before a fork: open it again in this process"));
        }
        if self.opened.closed.load(Ordering::Acquire) {
            return Err(ClosedError::new_err("the store is closed"));
        }
        Ok(&self.opened)
    }
}

#[pymethods]
impl Embedded {
    /// Opens the store at `url` (one per process and URL is plenty: clients of several
    /// principals share it).
    /// `writer_idle_ms`: write handles idle this long are closed, so other processes on
    /// the same data directory can take their turn. `tail_recheck_ms`: how often a live
    /// tail re-reads the log, to see appends made by other processes.
    /// `preallocate_logs`: new logs of an embedded store preallocated (log format version
    /// 2) or classic; `None`, the library's default (`berth_jsonl::PREALLOCATE_DEFAULT`).
    #[new]
    #[pyo3(signature = (url, writer_idle_ms=250, tail_recheck_ms=200, sweep_interval_ms=60_000, preallocate_logs=None))]
    fn new(
        py: Python<'_>,
        url: &str,
        writer_idle_ms: u64,
        tail_recheck_ms: u64,
        sweep_interval_ms: u64,
        preallocate_logs: Option<bool>,
    ) -> PyResult<Embedded> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("berth-native")
            .enable_all()
            .build()
            .map_err(|error| PyRuntimeError::new_err(format!("cannot start the runtime: {error}")))?;
        let store_url = berth::StoreUrl::parse(url).map_err(|error| error_answer(&error))?;
        let root = match &store_url {
            berth::StoreUrl::Embedded(path) => {
                std::fs::create_dir_all(path)
                    .map_err(|error| error_answer(&berth_core::Error::io("create the data directory", &error)))?;
                Some(std::fs::canonicalize(path).unwrap_or_else(|_| path.clone()).display().to_string())
            }
            _ => None,
        };
        let config = ServerConfig {
            rate_limit: None,
            writer_idle_close: (writer_idle_ms > 0).then(|| Duration::from_millis(writer_idle_ms)),
            tail_recheck: Duration::from_millis(tail_recheck_ms.max(10)),
            sweep_interval: (sweep_interval_ms > 0).then(|| Duration::from_millis(sweep_interval_ms)),
            ..ServerConfig::default()
        };
        let opened = py.detach(|| {
            runtime.block_on(async {
                let jsonl = berth::jsonl::JsonlOptions {
                    preallocate: preallocate_logs.unwrap_or(berth::jsonl::PREALLOCATE_DEFAULT),
                    ..berth::jsonl::JsonlOptions::default()
                };
                let options = berth::AssembleOptions { jsonl, ..berth::AssembleOptions::default() };
                let backends = berth::open_backends_with(&store_url, options).await?;
                let feed = berth::change_feed(&backends);
                let service = Arc::new(berth::service_over(backends, berth::system_clock()));
                Ok::<_, berth_core::Error>(Arc::new(InProcessServer::start(config, service, feed)))
            })
        });
        let server = opened.map_err(|error| error_answer(&error))?;
        let opened = Opened {
            runtime,
            server,
            closed: AtomicBool::new(false),
            blocking_threads: Arc::new(tokio::sync::Semaphore::new(SUBMITTED_ON_BLOCKING_THREADS_MAX)),
        };
        Ok(Embedded { pid: std::process::id(), root, opened: ManuallyDrop::new(opened) })
    }

    /// The canonical data directory of an embedded store (`None` for other stores).
    #[getter]
    fn root(&self) -> Option<String> {
        self.root.clone()
    }

    /// Answers one request of `principal`: `(status, headers, body)`.
    #[pyo3(signature = (principal, method, path, headers, body=None))]
    fn request<'py>(
        &self,
        py: Python<'py>,
        principal: &PyPrincipal,
        method: &str,
        path: &str,
        headers: Headers,
        body: Option<Vec<u8>>,
    ) -> PyResult<(u16, Headers, Bound<'py, PyBytes>)> {
        let opened = self.check()?;
        let request = build_request(method, path, &headers, body)?;
        let (status, headers, bytes) =
            py.detach(|| opened.runtime.block_on(answer_of(&opened.server, principal.0.clone(), request)));
        let bytes = bytes.map_err(|error| PyRuntimeError::new_err(format!("reading the answer failed: {error}")))?;
        Ok((status, headers, PyBytes::new(py, &bytes)))
    }

    /// Submits one request of `principal` and returns at once: its answer is posted to
    /// `completions` under `token` (`Completions.drain`). For asyncio callers, whose loop
    /// watches `completions.fd`.
    #[pyo3(signature = (principal, method, path, headers, body, completions, token))]
    #[allow(clippy::too_many_arguments)]
    fn submit(
        &self,
        principal: &PyPrincipal,
        method: &str,
        path: &str,
        headers: Headers,
        body: Option<Vec<u8>>,
        completions: &Completions,
        token: u64,
    ) -> PyResult<()> {
        let opened = self.check()?;
        let request = build_request(method, path, &headers, body)?;
        let server = opened.server.clone();
        let principal = principal.0.clone();
        let pending = Pending { mailbox: completions.mailbox.clone(), token, answered: false };
        let answer = async move {
            let (status, headers, body) = answer_of(&server, principal, request).await;
            body.map(|body| (status, headers, body)).map_err(Failure::Body)
        };
        let Ok(permit) = opened.blocking_threads.clone().try_acquire_owned() else {
            opened.runtime.spawn(async move { pending.answer(answer.await) });
            return Ok(());
        };
        let handle = opened.runtime.handle().clone();
        // On a thread of the blocking pool, polled in place as `request` polls it from
        // the caller's thread: a worker of the runtime would hand its other tasks to a
        // new thread at the append's `fdatasync` (`block_in_place`), which costs more
        // than waking a pooled thread.
        opened.runtime.spawn_blocking(move || {
            let answered = handle.block_on(answer);
            drop(permit);
            pending.answer(answered);
        });
        Ok(())
    }

    /// Starts a streamed request (the live tail): the status and headers now, the body
    /// chunk by chunk from the returned stream.
    fn stream(&self, py: Python<'_>, principal: &PyPrincipal, path: &str, headers: Headers) -> PyResult<Stream> {
        let opened = self.check()?;
        let request = build_request("GET", path, &headers, None)?;
        let response = py.detach(|| opened.runtime.block_on(opened.server.call(principal.0.clone(), request)));
        Ok(Stream {
            pid: self.pid,
            status: response.status().as_u16(),
            headers: headers_of(&response),
            handle: opened.runtime.handle().clone(),
            body: Mutex::new(Some(response.into_body().into_data_stream())),
        })
    }

    /// Closes the store: ends live tails and background work, closes write handles and
    /// flushes what they hold. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if std::process::id() != self.pid {
            return Ok(());
        }
        if self.opened.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let opened = &self.opened;
        py.detach(|| opened.runtime.block_on(opened.server.shutdown())).map_err(|error| error_answer(&error))
    }

    #[getter]
    fn closed(&self) -> bool {
        self.opened.closed.load(Ordering::Acquire)
    }
}

impl Drop for Embedded {
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            // A fork's copy: its runtime's threads exist only in the parent, so shutting
            // it down here could wait forever. Leak it; `close_inherited_descriptors`
            // releases what it held open.
            return;
        }
        if !self.opened.closed.swap(true, Ordering::AcqRel) {
            let _ = self.opened.runtime.block_on(self.opened.server.shutdown());
        }
        // SAFETY: `opened` is dropped exactly once, here, and never used again.
        unsafe { ManuallyDrop::drop(&mut self.opened) };
    }
}

/// The body of a streamed answer.
#[pyclass(frozen, module = "berth._native")]
struct Stream {
    pid: u32,
    #[pyo3(get)]
    status: u16,
    #[pyo3(get)]
    headers: Headers,
    handle: tokio::runtime::Handle,
    body: Mutex<Option<BodyDataStream>>,
}

#[pymethods]
impl Stream {
    /// The next chunk of the body: `None` at its end, `b""` if nothing came within
    /// `timeout_ms` (so the caller can look at its own state and wait again).
    fn next_chunk<'py>(&self, py: Python<'py>, timeout_ms: u64) -> PyResult<Option<Bound<'py, PyBytes>>> {
        if std::process::id() != self.pid {
            return Err(ForkedError::new_err("this stream was opened before a fork"));
        }
        let next = py.detach(|| {
            let mut body = self.body.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let Some(stream) = body.as_mut() else { return Ok(None) };
            let wait = Duration::from_millis(timeout_ms);
            let next = self.handle.block_on(async { tokio::time::timeout(wait, stream.next()).await });
            match next {
                Err(_elapsed) => Ok(Some(bytes_empty())),
                Ok(None) => {
                    *body = None;
                    Ok(None)
                }
                Ok(Some(Ok(chunk))) => Ok(Some(chunk)),
                Ok(Some(Err(error))) => {
                    *body = None;
                    Err(error.to_string())
                }
            }
        });
        match next {
            Ok(chunk) => Ok(chunk.map(|chunk| PyBytes::new(py, &chunk))),
            Err(message) => Err(PyRuntimeError::new_err(format!("the stream failed: {message}"))),
        }
    }

    /// Ends the stream (the server sees its tail disconnect). Idempotent.
    fn close(&self) {
        let stream = self.body.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
        if std::process::id() == self.pid {
            drop(stream);
        } else {
            std::mem::forget(stream);
        }
    }
}

fn bytes_empty() -> axum::body::Bytes {
    axum::body::Bytes::new()
}

/// In a child after `fork`: closes every descriptor that points inside `root` (the
/// parent's store's log files, lock files and catalog), so the locks the child
/// inherited do not keep the parent — or the child's own new store — out of its
/// sessions. Returns how many it closed. Call only in the child, before it opens the
/// store again; the parent's descriptors are untouched (they are its own copies).
#[pyfunction]
fn close_inherited_descriptors(root: &str) -> usize {
    let root = std::path::Path::new(root);
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else { return 0 };
    let mut inside = Vec::new();
    for entry in entries.flatten() {
        let Some(fd) = entry.file_name().to_str().and_then(|name| name.parse::<libc::c_int>().ok()) else {
            continue;
        };
        if let Ok(target) = std::fs::read_link(entry.path()) {
            if target.starts_with(root) {
                inside.push(fd);
            }
        }
    }
    for fd in &inside {
        // SAFETY: the descriptor belongs to a store this child will never use again
        // (its copy is leaked, see `Embedded::drop`); nothing else in the process owns it.
        unsafe { libc::close(*fd) };
    }
    inside.len()
}

/// With `BERTH_LOG` set (a filter, as for `berth serve`: `warn`, `berth=debug`…), the
/// store's log goes to stderr — the details of an `internal` error, which its answer
/// never carries, among them. Unset, nothing is logged: the module is a guest in the
/// Python process.
fn log_to_stderr_if_asked() {
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("BERTH_LOG") {
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    }
}

#[pymodule]
#[pyo3(name = "_native")]
fn berth_native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    log_to_stderr_if_asked();
    module.add_class::<Embedded>()?;
    module.add_class::<PyPrincipal>()?;
    module.add_class::<Stream>()?;
    module.add_class::<Completions>()?;
    module.add_function(wrap_pyfunction!(close_inherited_descriptors, module)?)?;
    module.add("BerthError", module.py().get_type::<BerthError>())?;
    module.add("ForkedError", module.py().get_type::<ForkedError>())?;
    module.add("ClosedError", module.py().get_type::<ClosedError>())?;
    Ok(())
}
