//! Generic conformance bodies (filled in by the conformance work).
