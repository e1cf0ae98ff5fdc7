//! The known conformance divergences, as data: which backend does not run which clause,
//! for want of which hook, and why. `skipped` (the only way a clause reports that it
//! did not run) refuses a skip that is not declared here, every suite's generated
//! `declared_divergences_name_real_clauses` test checks each entry names one of the
//! suite's clauses, and `berth-testkit`'s `conformance-divergences` binary prints the
//! per-backend count in the CI log (a skip printed by a passing test is hidden there).

/// One clause a backend does not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// `ConformanceBackend::name`.
    pub backend: &'static str,
    /// The macro suite the clause belongs to (`logstore`, `live`).
    pub suite: &'static str,
    pub clause: &'static str,
    /// The hook whose `None` makes the clause (or its part) not applicable.
    pub missing_hook: &'static str,
    pub why: &'static str,
}

const NO_PHYSICAL_TAIL: &str =
    "not applicable: whole events are stored (memory) or rows commit whole (postgres): there is no physical tail to tear";

/// Every declared divergence. JSONL has all hooks and none.
pub const DIVERGENCES: &[Divergence] = &[
    Divergence {
        backend: "memory",
        suite: "logstore",
        clause: "torn_tail_is_never_served_and_truncated_by_the_write_path",
        missing_hook: "corrupt_tail",
        why: NO_PHYSICAL_TAIL,
    },
    Divergence {
        backend: "postgres",
        suite: "logstore",
        clause: "torn_tail_is_never_served_and_truncated_by_the_write_path",
        missing_hook: "corrupt_tail",
        why: NO_PHYSICAL_TAIL,
    },
    Divergence {
        backend: "memory",
        suite: "logstore",
        clause: "read_before_skips_a_torn_tail",
        missing_hook: "corrupt_tail",
        why: NO_PHYSICAL_TAIL,
    },
    Divergence {
        backend: "postgres",
        suite: "logstore",
        clause: "read_before_skips_a_torn_tail",
        missing_hook: "corrupt_tail",
        why: NO_PHYSICAL_TAIL,
    },
    Divergence {
        backend: "memory",
        suite: "logstore",
        clause: "partial_reads_report_damage_inside_their_range_only",
        missing_hook: "damage_record",
        why: "not applicable: a stored event cannot be damaged in place",
    },
];

/// The declared divergence of `backend` for `clause` and `missing_hook`, if any.
pub fn declared(backend: &str, clause: &str, missing_hook: &str) -> Option<&'static Divergence> {
    DIVERGENCES.iter().find(|divergence| {
        divergence.backend == backend && divergence.clause == clause && divergence.missing_hook == missing_hook
    })
}

/// The backends the suites run on (`ConformanceBackend::name`).
pub const BACKENDS: &[&str] = &["memory", "jsonl", "postgres"];

/// One line per backend: how many clauses are not applicable to it, and which.
pub fn report() -> String {
    BACKENDS
        .iter()
        .map(|backend| {
            let clauses: Vec<String> = DIVERGENCES
                .iter()
                .filter(|divergence| divergence.backend == *backend)
                .map(|divergence| format!("{}::{}", divergence.suite, divergence.clause))
                .collect();
            let listed = if clauses.is_empty() { String::new() } else { format!(" ({})", clauses.join(", ")) };
            format!("conformance: {backend}: {} clause(s) not applicable{listed}", clauses.len())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_divergence_names_a_known_backend_once() {
        for divergence in DIVERGENCES {
            assert!(BACKENDS.contains(&divergence.backend), "{divergence:?}");
            let same = DIVERGENCES
                .iter()
                .filter(|other| {
                    (other.backend, other.clause, other.missing_hook)
                        == (divergence.backend, divergence.clause, divergence.missing_hook)
                })
                .count();
            assert_eq!(same, 1, "{divergence:?} is declared once");
        }
        assert!(report().contains("postgres: 2 clause(s)"), "{}", report());
    }
}
