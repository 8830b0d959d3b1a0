//! One module per command: its arguments and what it prints.

use std::path::Path;

use einsummable::{DType, Error, Result, Schedule};
use serde_json::Value;

pub mod check;
pub mod experiment;
pub mod exprog;
pub mod plan;
pub mod run;
pub mod specs;

/// What a command produced: its JSON object, its text, and whether it succeeded.
pub struct Report {
    /// The object printed with `--json`.
    pub json: Value,
    /// The text printed otherwise.
    pub text: String,
    /// False when the command ran but its check failed (exit code 1).
    pub ok: bool,
}

/// Parses a dtype argument.
pub fn parse_dtype(s: &str) -> Result<DType> {
    s.parse::<DType>().map_err(|e| Error::Usage(e.to_string()))
}

/// Parses a `--schedule` argument: `naive`, or `search` with the seed and the iteration
/// budget per exchange program.
pub fn parse_schedule(name: &str, seed: u64, iterations: usize) -> Result<Schedule> {
    match name {
        "naive" => Ok(Schedule::Naive),
        "search" => Ok(Schedule::Search { seed, iterations }),
        other => Err(Error::Usage(format!("unknown schedule `{other}`; valid: naive, search"))),
    }
}

/// Parses `--memory-budget GB` into bytes per device; it must be positive and finite.
pub fn parse_budget(gb: Option<f64>) -> Result<Option<f64>> {
    match gb {
        None => Ok(None),
        Some(gb) if gb.is_finite() && gb > 0.0 => Ok(Some(gb * 1e9)),
        Some(gb) => Err(Error::Usage(format!("--memory-budget: {gb} is not a positive number of GB"))),
    }
}

/// Creates the output directory `dir` given by `flag` (`--out`, `--dump`) and checks that a
/// file can be written in it, so that a bad path fails before the command's work, with the
/// flag and the reason.
pub fn prepare_dir(flag: &str, dir: &Path) -> Result<()> {
    let io = |what: &str, e: std::io::Error| Error::Io {
        path: dir.display().to_string(),
        message: format!("{flag}: {what}: {e}"),
    };
    std::fs::create_dir_all(dir).map_err(|e| io("cannot create the directory", e))?;
    let probe = dir.join(".einsummable-write-probe");
    std::fs::write(&probe, b"").map_err(|e| io("cannot write in the directory", e))?;
    std::fs::remove_file(&probe).map_err(|e| io("cannot write in the directory", e))
}
