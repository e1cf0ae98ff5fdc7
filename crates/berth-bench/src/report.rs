//! Measurements, their summary statistics, the targets they are reported against, the
//! scale curves, and the Markdown/JSON report.

use serde::Serialize;

/// What a row's headline figure is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Figure {
    /// Operations (`unit`) per second, one value per round: higher is better.
    #[default]
    Throughput,
    /// Milliseconds per round: lower is better.
    Time,
}

/// One variant of one workload: per-round figures and per-operation latencies.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Measurement {
    pub workload: String,
    pub variant: String,
    /// Is this a reference the other variants of the workload are compared with? A
    /// workload may have several (W1, W2, W5: the growing-file and overwrite raw files).
    pub reference: bool,
    /// How the ratio column names this reference where its workload has more than one
    /// (`growing`, `overwrite`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference_tag: Option<String>,
    pub figure: Figure,
    /// What is counted (`events`, `pages`, `fetches`, `ms`).
    pub unit: String,
    /// Throughput per round, in `unit` per second (`Figure::Throughput`).
    pub rounds_per_second: Vec<f64>,
    /// A duration per round in milliseconds (`Figure::Time`).
    pub rounds_ms: Vec<f64>,
    /// Per-operation latencies in microseconds (all rounds). The JSON report holds their
    /// summary (count, p50, p90, p99, p99.9, max), not every sample.
    #[serde(rename = "latency_us", serialize_with = "summarize_latencies")]
    pub latencies_us: Vec<f64>,
}

fn summarize_latencies<S: serde::Serializer>(latencies: &[f64], serializer: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = serializer.serialize_map(Some(6))?;
    map.serialize_entry("count", &latencies.len())?;
    for (name, p) in [("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9), ("max", 100.0)] {
        map.serialize_entry(name, &percentile(latencies, p))?;
    }
    map.end()
}

impl Measurement {
    pub fn new(workload: &str, variant: &str, reference: bool, figure: Figure, unit: &str) -> Measurement {
        Measurement {
            workload: workload.into(),
            variant: variant.into(),
            reference,
            figure,
            unit: unit.into(),
            ..Measurement::default()
        }
    }

    /// A throughput reference that the ratio column names `tag` beside the workload's
    /// other references.
    pub fn reference_tagged(workload: &str, variant: &str, tag: &str, unit: &str) -> Measurement {
        Measurement {
            reference_tag: Some(tag.into()),
            ..Measurement::new(workload, variant, true, Figure::Throughput, unit)
        }
    }

    /// The reference's name in a ratio cell: its tag, else its variant label.
    fn reference_name(&self) -> &str {
        self.reference_tag.as_deref().unwrap_or(&self.variant)
    }

    /// Adds one round of per-operation latencies (µs), each operation `items_per_op` units.
    pub fn record_round(&mut self, latencies_us: &[f64], items_per_op: usize) {
        let total_us: f64 = latencies_us.iter().sum();
        self.record_throughput((latencies_us.len() * items_per_op) as f64, total_us / 1e6);
        self.latencies_us.extend_from_slice(latencies_us);
    }

    /// Adds one round's throughput: `items` done in `seconds` of wall time.
    pub fn record_throughput(&mut self, items: f64, seconds: f64) {
        self.rounds_per_second.push(items / seconds.max(1e-9));
    }

    /// The headline figure: median throughput or median time.
    pub fn median(&self) -> Option<f64> {
        match self.figure {
            Figure::Throughput => median(&self.rounds_per_second),
            Figure::Time => median(&self.rounds_ms),
        }
    }

    /// How many times better than `other` (throughput ratio, or inverse time ratio).
    pub fn ratio_to(&self, other: &Measurement) -> Option<f64> {
        let (mine, theirs) = (self.median()?, other.median()?);
        Some(match self.figure {
            Figure::Throughput => mine / theirs,
            Figure::Time => theirs / mine,
        })
    }
}

pub fn median(values: &[f64]) -> Option<f64> {
    percentile(values, 50.0)
}

/// Nearest-rank percentile.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    Some(sorted[rank.min(sorted.len() - 1)])
}

/// A target from the issue, reported against (never asserted).
#[derive(Clone, Debug, Serialize)]
pub struct Target {
    pub workload: String,
    pub variant: String,
    pub goal: Goal,
    /// How the target reads in the issue (`≥ 0.8× raw write+fdatasync`).
    pub text: String,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Goal {
    /// `ratio_to(versus)` at least `ratio` (for timed rows: their time ÷ mine).
    RatioAtLeast { versus: String, ratio: f64 },
    /// `ratio_to` the faster of the `versus` variants (the higher throughput, or the
    /// shorter time) at least `ratio`: the lower of the ratios to each is judged.
    RatioToFasterAtLeast { versus: Vec<String>, ratio: f64 },
    /// Median time per round at most this many milliseconds.
    MedianAtMostMs(f64),
    /// Median throughput at least this many units per second.
    ThroughputAtLeast(f64),
    /// p99 per-operation latency at most this many microseconds.
    P99AtMostUs(f64),
    /// Median time at most `times` × `versus`'s (judged and printed as that time ratio,
    /// not its inverse: `≤ 1.2× the reference's time` reads as `1.05×`).
    TimeAtMostTimes { versus: String, times: f64 },
    /// p50 per-operation latency at most `times` × `versus`'s p50.
    P50AtMostTimes { versus: String, times: f64 },
}

/// A measured curve: one line per variant, `x` on a log scale.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Curve {
    /// `W7a append latency vs log length`.
    pub name: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// File name of the plot (`w7-append-latency.svg`).
    pub plot_file: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

impl Curve {
    pub fn series_mut(&mut self, label: &str) -> &mut Series {
        if let Some(index) = self.series.iter().position(|series| series.label == label) {
            return &mut self.series[index];
        }
        self.series.push(Series { label: label.to_owned(), points: Vec::new() });
        self.series.last_mut().expect("just pushed")
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub machine: String,
    pub command: String,
    pub profile: String,
    pub measurements: Vec<Measurement>,
    pub targets: Vec<Target>,
    pub curves: Vec<Curve>,
    /// Findings that are not a row (memory per idle session, skipped workloads, how a
    /// workload was modelled).
    pub notes: Vec<String>,
    /// Wall time of the whole run.
    pub total_seconds: f64,
}

impl Report {
    pub fn find(&self, workload: &str, variant: &str) -> Option<&Measurement> {
        self.measurements.iter().find(|m| m.workload == workload && m.variant == variant)
    }

    fn references_of(&self, workload: &str) -> Vec<&Measurement> {
        self.measurements.iter().filter(|m| m.workload == workload && m.reference).collect()
    }

    /// Of the `versus` variants of `measurement`'s workload that were measured, the
    /// faster one (the one `measurement` has the lowest ratio to), and that ratio.
    pub fn faster_of<'a>(&'a self, measurement: &Measurement, versus: &[String]) -> Option<(&'a Measurement, f64)> {
        versus
            .iter()
            .filter_map(|variant| self.find(&measurement.workload, variant))
            .filter_map(|reference| Some((reference, measurement.ratio_to(reference)?)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// The figure a target is judged on, and whether it is met.
    pub fn judge(&self, target: &Target) -> Option<(f64, bool)> {
        let measurement = self.find(&target.workload, &target.variant)?;
        Some(match &target.goal {
            Goal::RatioAtLeast { versus, ratio } => {
                let value = measurement.ratio_to(self.find(&target.workload, versus)?)?;
                (value, value >= *ratio)
            }
            Goal::RatioToFasterAtLeast { versus, ratio } => {
                let (_, value) = self.faster_of(measurement, versus)?;
                (value, value >= *ratio)
            }
            Goal::MedianAtMostMs(limit) => {
                let value = median(&measurement.rounds_ms)?;
                (value, value <= *limit)
            }
            Goal::ThroughputAtLeast(limit) => {
                let value = median(&measurement.rounds_per_second)?;
                (value, value >= *limit)
            }
            Goal::P99AtMostUs(limit) => {
                let value = percentile(&measurement.latencies_us, 99.0)?;
                (value, value <= *limit)
            }
            Goal::TimeAtMostTimes { versus, times } => {
                let value = measurement.median()? / self.find(&target.workload, versus)?.median()?;
                (value, value <= *times)
            }
            Goal::P50AtMostTimes { versus, times } => {
                let theirs = percentile(&self.find(&target.workload, versus)?.latencies_us, 50.0)?;
                let value = percentile(&measurement.latencies_us, 50.0)? / theirs;
                (value, value <= *times)
            }
        })
    }

    /// The whole report as Markdown: the table, the targets, the curves, the notes.
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "Machine: {}\n\nCommand: `{}` ({} profile, {:.0} s)\n\n",
            self.machine, self.command, self.profile, self.total_seconds
        );
        out.push_str(&self.measurement_table());
        out.push_str(&self.target_table());
        for curve in &self.curves {
            out.push_str(&curve_table(curve));
        }
        if !self.notes.is_empty() {
            out.push_str("\nNotes:\n\n");
            for note in &self.notes {
                out.push_str(&format!("- {note}\n"));
            }
        }
        out
    }

    /// Median (throughput or time), p50/p99 per operation, ratio to the reference of
    /// the same workload measured in the same run.
    pub fn measurement_table(&self) -> String {
        let mut out = String::from(
            "| workload | variant | median | p50 latency | p99 latency | ratio to reference |\n|---|---|---|---|---|---|\n",
        );
        for m in &self.measurements {
            let value = match (m.figure, m.median()) {
                (_, None) => "–".to_owned(),
                (Figure::Time, Some(ms)) => format!("{} ms", decimals(ms)),
                (Figure::Throughput, Some(rate)) => format!("{} {}/s", human(rate), m.unit),
            };
            let ratio = self.ratio_cell(m);
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                m.workload,
                m.variant,
                value,
                latency(&m.latencies_us, 50.0),
                latency(&m.latencies_us, 99.0),
                ratio
            ));
        }
        out.push_str(
            "\nRatio: throughput ÷ reference throughput, or reference time ÷ time (higher is better). \
             Medians over rounds; latencies over every operation of every round.\n",
        );
        if self.measurements.iter().any(|m| m.reference && m.reference_tag.is_some()) {
            out.push_str(
                "Two raw references where a workload writes (W1, W2, W5): `growing` appends to a file that grows \
                 with each record, `overwrite` writes the same records with pwrite into a pre-zeroed file; both \
                 fdatasync each record. Ratios to each are shown; targets use the faster one.\n",
            );
        }
        out
    }

    /// The ratio column: `reference`, or the ratio to the workload's reference; where
    /// the workload has several, the ratio to each, named (`0.92× growing · 0.68×
    /// overwrite`), after `reference` on the references' own rows.
    fn ratio_cell(&self, m: &Measurement) -> String {
        let references = self.references_of(&m.workload);
        let ratio = |reference: &Measurement| m.ratio_to(reference).map_or("–".into(), |r| format!("{r:.2}×"));
        match references.as_slice() {
            [] if m.reference => "reference".to_owned(),
            [] => "–".to_owned(),
            [_] if m.reference => "reference".to_owned(),
            [reference] => ratio(reference),
            several => {
                let ratios: Vec<String> = several
                    .iter()
                    .filter(|reference| !std::ptr::eq(**reference, m))
                    .map(|reference| format!("{} {}", ratio(reference), reference.reference_name()))
                    .collect();
                match m.reference {
                    true => format!("reference · {}", ratios.join(" · ")),
                    false => ratios.join(" · "),
                }
            }
        }
    }

    pub fn target_table(&self) -> String {
        if self.targets.is_empty() {
            return String::new();
        }
        let mut out = String::from("\n| target | workload · variant | measured | met? |\n|---|---|---|---|\n");
        for target in &self.targets {
            let (value, verdict) = match self.judge(target) {
                None => ("–".to_owned(), "not measured"),
                Some((value, met)) => {
                    let shown = match &target.goal {
                        Goal::RatioAtLeast { .. } => format!("{value:.2}×"),
                        Goal::RatioToFasterAtLeast { versus, .. } => self.faster_shown(target, versus, value),
                        Goal::MedianAtMostMs(_) => format!("{} ms", decimals(value)),
                        Goal::ThroughputAtLeast(_) => format!("{}/s", human(value)),
                        Goal::P99AtMostUs(_) => format!("{value:.0} µs"),
                        Goal::TimeAtMostTimes { .. } => format!("{value:.2}× its time"),
                        Goal::P50AtMostTimes { .. } => format!("{value:.2}× its p50"),
                    };
                    (shown, if met { "yes" } else { "**no**" })
                }
            };
            out.push_str(&format!(
                "| {} | {} · {} | {} | {} |\n",
                target.text, target.workload, target.variant, value, verdict
            ));
        }
        out
    }
}

impl Report {
    /// A target judged against the faster reference: its ratio and the reference's name,
    /// then the ratios to the others (`0.68× overwrite (growing: 0.92×)`).
    fn faster_shown(&self, target: &Target, versus: &[String], value: f64) -> String {
        let Some(measurement) = self.find(&target.workload, &target.variant) else {
            return format!("{value:.2}×");
        };
        let Some((faster, _)) = self.faster_of(measurement, versus) else {
            return format!("{value:.2}×");
        };
        let others: Vec<String> = versus
            .iter()
            .filter(|variant| **variant != faster.variant)
            .filter_map(|variant| self.find(&target.workload, variant))
            .filter_map(|other| Some(format!("{}: {:.2}×", other.reference_name(), measurement.ratio_to(other)?)))
            .collect();
        match others.is_empty() {
            true => format!("{value:.2}× {}", faster.reference_name()),
            false => format!("{value:.2}× {} ({})", faster.reference_name(), others.join(", ")),
        }
    }
}

fn curve_table(curve: &Curve) -> String {
    let mut xs: Vec<f64> = curve.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let mut out = format!(
        "\n{} ({} → {}; plot: `{}`)\n\n| {} |",
        curve.name, curve.x_label, curve.y_label, curve.plot_file, curve.x_label
    );
    for series in &curve.series {
        out.push_str(&format!(" {} |", series.label));
    }
    out.push_str(&format!("\n|---|{}\n", "---|".repeat(curve.series.len())));
    for x in xs {
        out.push_str(&format!("| {} |", human(x)));
        for series in &curve.series {
            let y = series.points.iter().find(|p| p.0 == x).map_or("–".to_owned(), |p| decimals(p.1));
            out.push_str(&format!(" {y} |"));
        }
        out.push('\n');
    }
    out
}

fn latency(values: &[f64], p: f64) -> String {
    percentile(values, p).map_or("–".to_owned(), |us| {
        if us >= 10_000.0 {
            format!("{:.1} ms", us / 1000.0)
        } else {
            format!("{us:.0} µs")
        }
    })
}

/// Three significant digits, without scientific notation.
pub fn decimals(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else if value >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

pub fn human(value: f64) -> String {
    if value >= 1_000_000.0 && value % 1_000_000.0 == 0.0 {
        format!("{:.0}M", value / 1e6)
    } else if value >= 10_000.0 {
        format!("{:.0}k", value / 1000.0)
    } else {
        format!("{value:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), Some(51.0));
        assert_eq!(percentile(&values, 99.0), Some(99.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn timed_ratio_is_inverse() {
        let mut fast = Measurement::new("w", "fast", false, Figure::Time, "ms");
        fast.rounds_ms = vec![10.0];
        let mut slow = Measurement::new("w", "slow", true, Figure::Time, "ms");
        slow.rounds_ms = vec![20.0];
        assert_eq!(fast.ratio_to(&slow), Some(2.0));
    }

    fn throughput(variant: &str, tag: Option<&str>, rate: f64) -> Measurement {
        let mut m = match tag {
            Some(tag) => Measurement::reference_tagged("W1", variant, tag, "events"),
            None => Measurement::new("W1", variant, false, Figure::Throughput, "events"),
        };
        m.rounds_per_second = vec![rate];
        m
    }

    /// A report of W1 with a growing and an overwrite reference at these rates, berth at
    /// 500/s, and a target of ≥ 0.85× the faster reference.
    fn two_references(growing: f64, overwrite: f64) -> Report {
        Report {
            measurements: vec![
                throughput("raw growing", Some("growing"), growing),
                throughput("raw overwrite", Some("overwrite"), overwrite),
                throughput("berth", None, 500.0),
            ],
            targets: vec![Target {
                workload: "W1".into(),
                variant: "berth".into(),
                goal: Goal::RatioToFasterAtLeast {
                    versus: vec!["raw growing".into(), "raw overwrite".into()],
                    ratio: 0.85,
                },
                text: "W1 ≥ 0.85× the faster raw reference".into(),
            }],
            ..Report::default()
        }
    }

    #[test]
    fn target_is_judged_against_the_faster_reference() {
        // The overwrite reference is the faster: 500 / 1000.
        let report = two_references(550.0, 1000.0);
        let target = &report.targets[0];
        assert_eq!(report.judge(target), Some((0.5, false)));
        let berth = report.find("W1", "berth").expect("row");
        let versus = ["raw growing".to_owned(), "raw overwrite".to_owned()];
        assert_eq!(
            report.faster_of(berth, &versus).map(|(m, r)| (m.variant.as_str(), r)),
            Some(("raw overwrite", 0.5))
        );
        // The growing file is the faster: 500 / 580, met.
        let report = two_references(580.0, 400.0);
        let (value, met) = report.judge(&report.targets[0]).expect("judged");
        assert!((value - 500.0 / 580.0).abs() < 1e-12 && met);
    }

    #[test]
    fn a_missing_reference_leaves_the_other() {
        let mut report = two_references(550.0, 1000.0);
        report.measurements.retain(|m| m.variant != "raw overwrite");
        let (value, _) = report.judge(&report.targets[0]).expect("judged");
        assert!((value - 500.0 / 550.0).abs() < 1e-12);
        report.measurements.retain(|m| m.variant != "raw growing");
        assert_eq!(report.judge(&report.targets[0]), None);
    }

    #[test]
    fn the_faster_of_timed_references_is_the_shorter_time() {
        let timed = |variant: &str, ms: f64| {
            let mut m = Measurement::new("W4", variant, variant != "berth", Figure::Time, "ms");
            m.rounds_ms = vec![ms];
            m
        };
        let report = Report {
            measurements: vec![timed("a", 10.0), timed("b", 20.0), timed("berth", 15.0)],
            ..Report::default()
        };
        let berth = report.find("W4", "berth").expect("row");
        let (faster, ratio) = report.faster_of(berth, &["a".into(), "b".into()]).expect("faster");
        assert_eq!((faster.variant.as_str(), ratio), ("a", 10.0 / 15.0));
    }

    #[test]
    fn report_shows_both_ratios_and_which_reference_the_target_uses() {
        let report = two_references(550.0, 1000.0);
        let table = report.measurement_table();
        assert!(table.contains("| W1 | raw growing | 550 events/s | – | – | reference · 0.55× overwrite |"), "{table}");
        assert!(
            table.contains("| W1 | raw overwrite | 1000 events/s | – | – | reference · 1.82× growing |"),
            "{table}"
        );
        assert!(table.contains("| W1 | berth | 500 events/s | – | – | 0.91× growing · 0.50× overwrite |"), "{table}");
        assert!(table.contains("targets use the faster one"), "{table}");
        let targets = report.target_table();
        assert!(targets.contains("| 0.50× overwrite (growing: 0.91×) | **no** |"), "{targets}");

        let report = two_references(580.0, 400.0);
        assert!(
            report.target_table().contains("| 0.86× growing (overwrite: 1.25×) | yes |"),
            "{}",
            report.target_table()
        );
    }

    #[test]
    fn a_single_reference_reads_as_before() {
        let mut reference = throughput("raw", None, 1000.0);
        reference.reference = true;
        let report = Report { measurements: vec![reference, throughput("berth", None, 500.0)], ..Report::default() };
        let table = report.measurement_table();
        assert!(table.contains("| W1 | raw | 1000 events/s | – | – | reference |"), "{table}");
        assert!(table.contains("| W1 | berth | 500 events/s | – | – | 0.50× |"), "{table}");
        assert!(!table.contains("targets use the faster one"), "{table}");
    }
}
