//! The wire contract of berth's `/v1` HTTP API.
//!
//! Every request and response body, the error body, and the event as it travels are
//! defined here and nowhere else, each with its OpenAPI schema (utoipa derives). They are
//! deliberately separate from the catalog and storage types (`SessionRecord`, `Event`,
//! the service's requests): the server converts at its edge, so a change to how berth
//! stores a record cannot change what a client receives, and a change here is a change
//! of the contract, pinned by the golden files in `tests/golden/` and by the committed
//! `openapi.json`.
//!
//! Rules every type follows:
//! - request bodies refuse unknown fields (`additionalProperties: false`);
//! - ids are parsed by the strict id grammar when a body is decoded (`ID_PATTERN`);
//! - numbers are unsigned 64-bit unless bounded more tightly; times are milliseconds
//!   since the Unix epoch;
//! - optional response fields are omitted or `null` exactly as documented per field.

pub mod admin;
pub mod error;
pub mod events;
pub mod int64;
pub mod memory;
pub mod runs;
pub mod sessions;
pub mod usage;

pub use admin::{AuditEntryBody, AuditParams, AuditVerificationBody, ExportParams, ImportedBody, PrincipalBody};
pub use admin::{AuditSearchPage, AuditSearchParams, BackupBody, BackupRequestBody, RetentionPolicyBody, Role};
pub use error::ErrorBody;
pub use events::{AppendBody, AppendOutcomeBody, EventBody, EventPage, NewEventBody, ReadParams, TailParams};
pub use memory::{ConditionBody, DeleteMemoryParams, FilterOpBody, ForgetBody, ForgetReportBody, MemoryExportParams};
pub use memory::{DeleteMemoryBody, MemoryDeletedBody, MemoryKeyBody, MemoryQuotaBody};
pub use memory::{MemoryImportedBody, MemoryItemBody, MemoryItemParams, MemoryOrder, MemoryPageBody, MemorySearchBody};
pub use memory::{MemoryUsageBody, NamespacePageBody, NamespaceParams, PutMemoryBody};
pub use runs::{AttachBody, AttachmentBody, DetachBody, OnBusy, ResumeOutcomeBody, RunBody, RunStatus};
pub use sessions::{CloseBody, ClosePolicy, ConcurrencyBody, CreateSessionBody, ForkBody, HeaderBody, ListParams};
pub use sessions::{CountParams, SessionCountsBody, StatusCountBody, UpdateSessionBody};
pub use sessions::{ParentBody, PolicyBody, RevisionParams, ScopeBody, SessionBody, SessionPage, SessionStatus};
pub use usage::{ModelUsageBody, SessionUsageBody, UsageBody, UsageParams};

/// The grammar of every id (session, run, tenant, user, project) as a regular
/// expression without look-around: 1–128 bytes of `[A-Za-z0-9._~-]`, never `.` or `..`.
pub const ID_PATTERN: &str =
    r"^([A-Za-z0-9_~-][A-Za-z0-9._~-]{0,127}|\.[A-Za-z0-9_~-][A-Za-z0-9._~-]{0,126}|\.\.[A-Za-z0-9._~-]{1,126})$";

/// The grammar of an event type: lowercase segments separated by `/`.
pub const EVENT_TYPE_PATTERN: &str = r"^[a-z0-9_.-]+(/[a-z0-9_.-]+)*$";
