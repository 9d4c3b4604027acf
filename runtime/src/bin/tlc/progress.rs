//! A spinner on stderr while one long simulation runs: the wall time so
//! far and the simulated time it has reached (the run reports it through
//! `Launch::progress_ps`). Hidden when stderr is not a terminal.

use indicatif::{ProgressBar, ProgressStyle};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Runs `run`, showing `what` and the simulated time it reports into
/// `reached_ps` until it returns.
pub fn simulating<T>(what: &str, reached_ps: &AtomicU64, run: impl FnOnce() -> T) -> T {
    let done = AtomicBool::new(false);
    let spinner = ProgressBar::new_spinner();
    spinner.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    let out = std::thread::scope(|s| {
        let ticker = s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                let us = reached_ps.load(Ordering::Relaxed) as f64 / 1e6;
                spinner.set_message(format!("{what}: {us:.3} us simulated"));
                spinner.tick();
                std::thread::park_timeout(Duration::from_millis(100));
            }
        });
        let out = run();
        done.store(true, Ordering::Relaxed);
        // A short run ends now, not at the ticker's next wake-up.
        ticker.thread().unpark();
        out
    });
    spinner.finish_and_clear();
    out
}
