//! Prints how many conformance clauses are not applicable to each backend (the declared
//! divergences, `berth_testkit::conformance::divergence`), for the CI log: nextest hides
//! what a passing test prints, so a skip would otherwise go unseen.

fn main() {
    println!("{}", berth_testkit::conformance::divergence::report());
}
