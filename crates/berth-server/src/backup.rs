//! `POST /v1/admin/backup`: a backup of the whole store, taken by the server on its own
//! machine. The server names no backend, so the backup itself is its caller's
//! (`BackupRunner`, which `berth serve` implements with `berth::backup`); here are the
//! rules of the endpoint: an admin key of the operator tenant only (a backup copies
//! every tenant's data; a refusal is audited), a plain directory name under the
//! configured backup directory (never a path), one backup at a time, and the work on
//! the blocking pool, never on the request's runtime. The request has no timeout: it
//! answers when the backup is done (a client that gives up does not stop it; the
//! backup's manifest, written last, says whether it finished).

use crate::api::{call, json, Caller, Shared};
use crate::error::ApiError;
use crate::limits::StrictJson;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use berth_api::{BackupBody, BackupRequestBody, ErrorBody};
use berth_core::{Error, TenantId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Takes a backup into the directory `name` under the server's backup directory,
/// incremental on top of the backup `since` when given. Blocking: the server calls it
/// on the blocking pool.
pub trait BackupRunner: Send + Sync + 'static {
    fn backup(&self, name: &str, since: Option<&str>) -> berth_core::Result<BackupBody>;
}

/// The server's backups: who may take them, and how.
pub struct Backups {
    runner: Arc<dyn BackupRunner>,
    operator_tenant: TenantId,
    running: Arc<AtomicBool>,
}

impl Backups {
    /// Backups taken by `runner`, for admin keys of `operator_tenant`.
    pub fn new(runner: Arc<dyn BackupRunner>, operator_tenant: TenantId) -> Backups {
        Backups { runner, operator_tenant, running: Arc::new(AtomicBool::new(false)) }
    }
}

/// Longest backup name (a directory name).
pub const BACKUP_NAME_BYTES_MAX: usize = 128;

/// A backup's name: one directory name, never a path (`[A-Za-z0-9._-]`, not starting
/// with `.`, at most 128 bytes).
pub fn check_backup_name(name: &str) -> berth_core::Result<()> {
    let plain = name.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'));
    if name.is_empty() || name.len() > BACKUP_NAME_BYTES_MAX || name.starts_with('.') || !plain {
        return Err(Error::invalid(
            "backup name",
            format!(
                "{name:?} is not a backup name: letters, digits, '.', '_' and '-', not starting with '.', at most \
                 {BACKUP_NAME_BYTES_MAX} bytes"
            ),
        ));
    }
    Ok(())
}

/// Marks a backup running; cleared when dropped (when the blocking work ends, even if
/// the request was dropped before).
struct Running(Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Operator only: takes a backup of the whole store into a new directory under the
/// server's backup directory (`berth serve --backup-dir`), on the server's machine.
#[utoipa::path(post, path = "/v1/admin/backup", tag = "admin", request_body = BackupRequestBody,
    responses((status = 201, body = BackupBody), (status = 403, body = ErrorBody),
        (status = 404, description = "no earlier backup named `since` (`not_found`)", body = ErrorBody),
        (status = 409, description = "the name is taken (`already_exists`), or a backup is running (`busy`)",
            body = ErrorBody),
        (status = 422, description = "not a directory name, `since` not a backup of this store, or no --backup-dir (`invalid`)",
            body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn take_backup(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictJson(body): StrictJson<BackupRequestBody>,
) -> Result<Response, ApiError> {
    let Some(backups) = &state.backups else {
        return Err(ApiError::from(Error::invalid(
            "backup",
            "this server takes no backups: start berth serve with --backup-dir DIR",
        )));
    };
    state.service.authorize_operator(&principal, &backups.operator_tenant, "backup").await?;
    check_backup_name(&body.name)?;
    if let Some(since) = &body.since {
        check_backup_name(since)?;
    }
    if backups.running.swap(true, Ordering::AcqRel) {
        return Err(ApiError::from(Error::Busy { id: "backup".into(), reason: "a backup is already running".into() }));
    }
    let running = Running(Arc::clone(&backups.running));
    let runner = Arc::clone(&backups.runner);
    // As every handler's service call: on a task of its own, so a client that leaves
    // neither stops the backup nor loses its audit record.
    let taken = call(&state, move |service| async move {
        let (name, since) = (body.name.clone(), body.since.clone());
        let taken = tokio::task::spawn_blocking(move || {
            let _running = running;
            runner.backup(&name, since.as_deref())
        })
        .await
        .unwrap_or_else(|error| Err(Error::Unavailable { reason: format!("the backup stopped: {error}") }));
        let details = match &taken {
            Ok(backup) => serde_json::json!({"name": backup.name, "id": backup.id, "kind": backup.kind,
                "sessions": backup.sessions, "bytes": backup.bytes}),
            Err(error) => serde_json::json!({"name": body.name, "error": error.code()}),
        };
        service.audit_operator_action(&principal, "backup", details).await;
        taken
    })
    .await?;
    Ok(json(StatusCode::CREATED, &taken))
}
