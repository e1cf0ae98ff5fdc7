//! Smoke test of `berth bench`: every workload runs end to end at a tiny size (seconds),
//! the report has every row, curve and target, and the plots are written. No timing is
//! asserted: figures at this size mean nothing.

use berth_bench::{BenchOptions, Figure, NoProgress, Profile};

#[test]
fn tiny_run_reports_every_workload_and_writes_plots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = BenchOptions::new(Profile::Tiny, dir.path().join("data"));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let report = runtime.block_on(berth_bench::run(&options, &NoProgress)).expect("bench run");

    let prefixes = ["W1", "W2", "W3 list", "W3 fetch", "W3 create", "W3 create, 8", "W4", "W5", "W6", "W8 memory put"];
    for prefix in prefixes.into_iter().chain(["W8 memory get", "W8 memory search", "W8 memory forget"]) {
        assert!(report.measurements.iter().any(|m| m.workload.starts_with(prefix)), "{prefix} missing");
    }
    let mut workloads: Vec<&str> = report.measurements.iter().map(|m| m.workload.as_str()).collect();
    workloads.dedup();
    assert_eq!(workloads.iter().filter(|w| w.starts_with("W6")).count(), options.sizes.http_sessions.len());
    for workload in workloads {
        let rows: Vec<_> = report.measurements.iter().filter(|m| m.workload == workload).collect();
        // Memory searches and `forget` have absolute targets (a plain table has no such
        // search): no reference row.
        if workload.starts_with("W8 memory search") || workload.starts_with("W8 memory forget") {
            assert!(rows.iter().all(|m| !m.reference), "{workload}: no reference");
        } else {
            assert!(rows.len() >= 2, "{workload}: a variant and its reference, got {}", rows.len());
            // The write workloads have two raw references: a growing file and an overwrite.
            let references = if ["W1", "W2", "W5"].iter().any(|w| workload.starts_with(w)) { 2 } else { 1 };
            let tags: Vec<_> = rows.iter().filter(|m| m.reference).map(|m| m.reference_tag.as_deref()).collect();
            assert_eq!(tags.len(), references, "{workload}: its references");
            if references == 2 {
                assert_eq!(tags, [Some("growing"), Some("overwrite")], "{workload}");
            }
        }
        for row in rows {
            let samples = match row.figure {
                Figure::Throughput => &row.rounds_per_second,
                Figure::Time => &row.rounds_ms,
            };
            let repeats = if workload.starts_with("W4") { options.sizes.resume_repeats } else { 1 };
            assert_eq!(samples.len(), options.sizes.rounds * repeats, "{workload} {}", row.variant);
            assert!(
                samples.iter().all(|value| value.is_finite() && *value > 0.0),
                "{} {}: {samples:?}",
                row.workload,
                row.variant
            );
        }
    }
    assert!(report.targets.iter().all(|target| report.judge(target).is_some()), "every target is measured");

    assert_eq!(report.curves.len(), 4, "W7a–d");
    for curve in &report.curves {
        assert!(!curve.series.is_empty() && curve.series.iter().all(|s| !s.points.is_empty()), "{}", curve.name);
    }
    let lengths: Vec<f64> = report.curves[0].series[0].points.iter().map(|p| p.0).collect();
    assert_eq!(lengths, options.sizes.scale_log_lengths.iter().map(|&l| l as f64).collect::<Vec<_>>());

    let markdown = report.markdown();
    assert!(markdown.contains("| workload | variant | median |") && markdown.contains("| target |"));
    assert!(markdown.contains("growing · ") && markdown.contains("targets use the faster one"), "both raw references");
    let plots = berth_bench::write_plots(&report, dir.path()).expect("plots");
    assert_eq!(plots.len(), 4);
    for plot in plots {
        let svg = std::fs::read_to_string(&plot).expect("plot written");
        assert!(svg.starts_with("<svg") && svg.contains("<text"), "{}", plot.display());
    }
    let json = serde_json::to_value(&report).expect("report serializes");
    assert!(json["measurements"].as_array().is_some_and(|rows| !rows.is_empty()));
}
