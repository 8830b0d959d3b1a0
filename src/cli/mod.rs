//! One module per command: its arguments and what it prints.

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
