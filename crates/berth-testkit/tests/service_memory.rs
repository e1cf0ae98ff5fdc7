//! The `SessionService` conformance suite on the in-memory backend (memory log store +
//! memory catalog).

use berth_testkit::service_conformance::MemoryService;

berth_testkit::service_conformance!(MemoryService::new());
