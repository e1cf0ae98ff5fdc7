//! Progress reporting: the run announces how many steps it has, then each step.

/// Told what the run is doing. Implementations must not block.
pub trait Progress: Send + Sync {
    /// The run has `steps` steps in all.
    fn plan(&self, steps: u64);
    /// The next step starts.
    fn step(&self, message: &str);
    /// The run is over.
    fn finish(&self) {}
}

/// Reports nothing (tests).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn plan(&self, _steps: u64) {}
    fn step(&self, _message: &str) {}
}

/// An `indicatif` bar on stderr (hidden when stderr is not a terminal).
#[derive(Debug)]
pub struct ProgressBar(indicatif::ProgressBar);

impl ProgressBar {
    pub fn stderr() -> ProgressBar {
        let bar = indicatif::ProgressBar::new(0);
        let style = indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:32}] {pos}/{len} {wide_msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        ProgressBar(bar)
    }
}

impl Progress for ProgressBar {
    fn plan(&self, steps: u64) {
        self.0.set_length(steps);
    }

    fn step(&self, message: &str) {
        if self.0.is_hidden() {
            eprintln!("berth bench: {message}");
        }
        self.0.set_message(message.to_owned());
        self.0.inc(1);
    }

    fn finish(&self) {
        self.0.finish_and_clear();
    }
}
