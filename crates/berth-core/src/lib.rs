//! berth's pure core: the vocabulary every other crate speaks.
//!
//! Nothing in this crate does I/O. It defines ids (strictly parsed newtypes), the
//! immutable session header, the event envelope and its reserved vocabulary, strict
//! JSON kept exact (and a canonical form for envelopes), the lifecycle transition
//! function, turn repair, named limits, the error vocabulary, and the `Clock` through
//! which all time enters the system.

pub mod clock;
pub mod content;
pub mod error;
pub mod event;
pub mod header;
pub mod idempotency;
pub mod ids;
pub mod json;
pub mod lifecycle;
pub mod limits;
pub mod model_call;
pub mod repair;
pub mod vocabulary;

pub use clock::{Clock, SystemClock, Timestamp};
pub use error::{ClassRow, Error, ErrorClass, Location, Result, WriteHolder};
pub use event::{Epoch, Event, EventType, Revision, Seq};
pub use header::{Concurrency, ParentRef, Scope, SessionHeader, SessionPolicy, SESSION_FORMAT_VERSION};
pub use idempotency::{IdempotencyKey, IdempotencyMark, KeyedBatch};
pub use ids::{ProjectId, RunId, SessionId, SessionKey, TenantId, UserId};
pub use json::JsonText;
