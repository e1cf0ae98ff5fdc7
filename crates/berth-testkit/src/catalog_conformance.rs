//! Generic Catalog conformance bodies (memory, SQLite, later PostgreSQL).
