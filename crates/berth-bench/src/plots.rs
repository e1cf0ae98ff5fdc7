//! SVG plots of the scale curves (plotters, SVG backend only: no font library needed).
//! Both axes are logarithmic: a flat curve stays flat, a linear one has slope 1.

use crate::report::{Curve, Report};
use berth_core::{Error, Result};
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// Writes one SVG per curve of `report` into `dir`; returns the paths written.
pub fn write_plots(report: &Report, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|error| Error::io("create plot dir", &error))?;
    let mut written = Vec::new();
    for curve in report.curves.iter().filter(|curve| curve.series.iter().any(|s| !s.points.is_empty())) {
        let path = dir.join(&curve.plot_file);
        draw(curve, &path).map_err(|reason| Error::invalid("plot", format!("{}: {reason}", curve.plot_file)))?;
        written.push(path);
    }
    Ok(written)
}

/// The range of `values` widened to whole decades, clamped above zero (log axes).
fn decades(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (low, high) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::MAX, f64::MIN_POSITIVE), |(low, high), v| (low.min(v), high.max(v)));
    if low > high {
        return (1.0, 10.0);
    }
    let low = 10f64.powf(low.log10().floor());
    let high = 10f64.powf(high.log10().ceil()).max(low * 10.0);
    (low, high)
}

fn draw(curve: &Curve, path: &Path) -> std::result::Result<(), String> {
    let points = || curve.series.iter().flat_map(|series| series.points.iter());
    let (x_low, x_high) = decades(points().map(|p| p.0));
    let (y_low, y_high) = decades(points().map(|p| p.1));
    let root = SVGBackend::new(path, (820, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(&curve.name, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d((x_low..x_high).log_scale(), (y_low..y_high).log_scale())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(curve.x_label.as_str())
        .y_desc(curve.y_label.as_str())
        .x_label_formatter(&|x| crate::report::human(*x))
        .y_label_formatter(&|y| crate::report::decimals(*y))
        .draw()
        .map_err(|e| e.to_string())?;
    for (index, series) in curve.series.iter().enumerate() {
        let color = Palette99::pick(index).to_rgba();
        let shown: Vec<(f64, f64)> = series.points.iter().copied().filter(|p| p.0 > 0.0 && p.1 > 0.0).collect();
        chart
            .draw_series(LineSeries::new(shown.clone(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(series.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(shown.into_iter().map(|p| Circle::new(p, 3, color.filled()))).map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}
