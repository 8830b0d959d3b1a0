//! Progress of an experiment on stderr: done/total, the current item, elapsed time and ETA.
//! On a terminal it is an `indicatif` bar redrawn in place; otherwise (a log, CI) one line is
//! printed per tenth of the work, so logs stay short and still say how far a run got.

use std::io::IsTerminal;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// What a terminal bar shows: the same fields, in the same order, as [`Progress::line`].
const TEMPLATE: &str = "{prefix}: {pos}/{len} ({percent}%) [{bar:24}] {elapsed} elapsed, ETA {eta}, {msg}";

/// Progress of `total` items of work labelled `what`.
#[derive(Debug)]
pub struct Progress {
    what: String,
    total: usize,
    done: usize,
    current: String,
    started: Instant,
    /// Where the progress goes: nowhere, a terminal bar, or a log line per tenth.
    sink: Sink,
    /// Tenths of the work already reported (in a log).
    reported: usize,
}

#[derive(Debug)]
enum Sink {
    Quiet,
    Bar(ProgressBar),
    Log,
}

impl Progress {
    /// Progress over `total` items; `enabled: false` prints nothing.
    pub fn new(what: &str, total: usize, enabled: bool) -> Self {
        let sink = if !enabled || total == 0 {
            Sink::Quiet
        } else if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
            // The template is a constant; a bad one would be a bug caught by the unit test.
            let style = ProgressStyle::with_template(TEMPLATE).unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style.progress_chars("=> "));
            bar.set_prefix(what.to_string());
            Sink::Bar(bar)
        } else {
            Sink::Log
        };
        Progress {
            what: what.to_string(),
            total,
            done: 0,
            current: String::new(),
            started: Instant::now(),
            sink,
            reported: 0,
        }
    }

    /// Starts the next item (shown on a terminal while it runs).
    pub fn start(&mut self, item: &str) {
        self.current = item.to_string();
        if let Sink::Bar(bar) = &self.sink {
            bar.set_message(item.to_string());
        }
    }

    /// Marks the current item done.
    pub fn done(&mut self) {
        self.done = (self.done + 1).min(self.total);
        match &self.sink {
            Sink::Quiet => {}
            Sink::Bar(bar) => bar.set_position(self.done as u64),
            Sink::Log => {
                let tenths = self.done * 10 / self.total.max(1);
                if tenths > self.reported {
                    self.reported = tenths;
                    eprintln!("{}", self.line());
                }
            }
        }
    }

    /// Ends the progress (the bar stays on the terminal, complete).
    pub fn finish(&mut self) {
        if let Sink::Bar(bar) = &self.sink {
            bar.finish();
        }
    }

    /// The progress line of a log: `what: done/total (pct%), elapsed, ETA, current item`.
    pub fn line(&self) -> String {
        let elapsed = self.started.elapsed().as_secs_f64();
        let eta = if self.done == 0 {
            "ETA ?".to_string()
        } else {
            format!("ETA {}", seconds(elapsed / self.done as f64 * (self.total - self.done) as f64))
        };
        let pct = (self.done * 100).checked_div(self.total).unwrap_or(100);
        format!(
            "{}: {}/{} ({pct}%), {} elapsed, {eta}, {}",
            self.what,
            self.done,
            self.total,
            seconds(elapsed),
            self.current
        )
    }
}

fn seconds(s: f64) -> String {
    if s >= 60.0 { format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64) } else { format!("{s:.1}s") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_counts_and_estimates() {
        let mut p = Progress::new("chains", 4, false);
        assert!(p.line().starts_with("chains: 0/4 (0%)") && p.line().contains("ETA ?"), "{}", p.line());
        p.start("chain-a p=4 dp");
        p.done();
        let line = p.line();
        assert!(line.starts_with("chains: 1/4 (25%)") && line.ends_with("chain-a p=4 dp"), "{line}");
        assert!(!line.contains("ETA ?"), "{line}");
        assert_eq!(seconds(75.0), "1m15s");
    }

    #[test]
    fn the_bar_template_is_valid() {
        assert!(ProgressStyle::with_template(TEMPLATE).is_ok());
    }
}
