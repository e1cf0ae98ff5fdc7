//! Measurements, their summary statistics, and the Markdown/JSON report.

use serde::Serialize;

/// One variant of one workload: per-round throughput and per-operation latencies.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Measurement {
    pub workload: String,
    pub variant: String,
    /// Is this the reference the other variants are compared with?
    pub reference: bool,
    pub unit: String,
    /// Throughput per round, in `unit` per second.
    pub rounds_per_second: Vec<f64>,
    /// Per-operation latencies in microseconds (all rounds).
    pub latencies_us: Vec<f64>,
    /// A duration per round in milliseconds, for workloads measured as one operation.
    pub rounds_ms: Vec<f64>,
}

pub fn median(values: &[f64]) -> Option<f64> {
    percentile(values, 50.0)
}

pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    Some(sorted[rank.min(sorted.len() - 1)])
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub machine: String,
    pub command: String,
    pub measurements: Vec<Measurement>,
}

impl Report {
    /// Markdown table: median throughput (or time), p50/p99 latency, ratio to the
    /// reference of the same workload measured in the same run.
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| workload | variant | median | p50 latency | p99 latency | ratio to reference |\n|---|---|---|---|---|---|\n",
        );
        for m in &self.measurements {
            let reference = self
                .measurements
                .iter()
                .find(|r| r.workload == m.workload && r.reference);
            let (value, ratio) = if !m.rounds_ms.is_empty() {
                let mine = median(&m.rounds_ms).unwrap_or(f64::NAN);
                let theirs = reference
                    .and_then(|r| median(&r.rounds_ms))
                    .unwrap_or(f64::NAN);
                (format!("{mine:.2} ms"), theirs / mine)
            } else {
                let mine = median(&m.rounds_per_second).unwrap_or(f64::NAN);
                let theirs = reference
                    .and_then(|r| median(&r.rounds_per_second))
                    .unwrap_or(f64::NAN);
                (format!("{} {}/s", human(mine), m.unit), mine / theirs)
            };
            let p50 = percentile(&m.latencies_us, 50.0)
                .map(|v| format!("{v:.0} µs"))
                .unwrap_or_else(|| "–".into());
            let p99 = percentile(&m.latencies_us, 99.0)
                .map(|v| format!("{v:.0} µs"))
                .unwrap_or_else(|| "–".into());
            let ratio = if m.reference {
                "reference".to_owned()
            } else {
                format!("{ratio:.2}×")
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                m.workload, m.variant, value, p50, p99, ratio
            ));
        }
        out.push_str("\nRatios: throughput ÷ reference throughput, or reference time ÷ time (higher is better).\n");
        out
    }
}

fn human(value: f64) -> String {
    if value >= 10_000.0 {
        format!("{:.0}k", value / 1000.0)
    } else {
        format!("{value:.0}")
    }
}
