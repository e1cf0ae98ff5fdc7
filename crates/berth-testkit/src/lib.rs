//! berth's test kit: everything a backend needs to prove it keeps the contract.
//!
//! - `conformance`: one generic async body per contract clause, run against every
//!   backend through a `ConformanceBackend` factory (memory, JSONL, later PostgreSQL).
//! - `fault_fs`: a fault-injecting implementation of the JSONL backend's `Fs` trait.
//! - `sim_fs`: an in-memory `Fs` that models what survives a power loss (`SimFs`).
//! - `clock`: a `FakeClock` that tests move by hand.
//! - `lincheck`: a linearizability checker for recorded histories of one session.

pub mod catalog_conformance;
pub mod clock;
pub mod conformance;
pub mod fault_fs;
pub mod lincheck;
pub mod memory_conformance;
pub mod service_conformance;
pub mod sim_fs;

pub use clock::FakeClock;
