//! A progress line on stderr: done/total, the current item, elapsed time and ETA. On a
//! terminal it is redrawn in place with `\r`; otherwise (a log, CI) one line is printed per
//! tenth of the work, so logs stay short.

use std::io::IsTerminal;
use std::time::Instant;

/// Progress of `total` items of work labelled `what`.
#[derive(Debug)]
pub struct Progress {
    what: String,
    total: usize,
    done: usize,
    current: String,
    started: Instant,
    enabled: bool,
    terminal: bool,
    /// Tenths of the work already reported (without a terminal).
    reported: usize,
}

impl Progress {
    /// Progress over `total` items; `enabled: false` prints nothing.
    pub fn new(what: &str, total: usize, enabled: bool) -> Self {
        Progress {
            what: what.to_string(),
            total,
            done: 0,
            current: String::new(),
            started: Instant::now(),
            enabled: enabled && total > 0,
            terminal: std::io::stderr().is_terminal(),
            reported: 0,
        }
    }

    /// Starts the next item (shown on a terminal while it runs).
    pub fn start(&mut self, item: &str) {
        self.current = item.to_string();
        if self.enabled && self.terminal {
            eprint!("\r\x1b[2K{}", self.line());
        }
    }

    /// Marks the current item done.
    pub fn done(&mut self) {
        self.done = (self.done + 1).min(self.total);
        if !self.enabled {
            return;
        }
        if self.terminal {
            eprint!("\r\x1b[2K{}", self.line());
        } else {
            let tenths = self.done * 10 / self.total.max(1);
            if tenths > self.reported {
                self.reported = tenths;
                eprintln!("{}", self.line());
            }
        }
    }

    /// Ends the progress line (a newline on a terminal).
    pub fn finish(&mut self) {
        if self.enabled && self.terminal {
            eprintln!();
        }
    }

    /// The progress line: `what: done/total (pct%), elapsed, ETA, current item`.
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
}
