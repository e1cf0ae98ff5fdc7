//! Unit tests: schema, migrations, error mapping and query plans.
