//! W6: W1 and W5 through HTTP against `berth serve`, driven by the server's bounded
//! loopback load generator. Until that generator exists the workload is reported as
//! not run, never faked.

/// Why W6 did not run, for the report's notes.
pub fn not_run_note() -> String {
    "W6 (HTTP) not run: berth-server's loopback load generator (`berth-loadgen`) is not implemented yet; \
     W6 will call it once it lands"
        .to_owned()
}
