//! One module per command: its arguments and what it prints.

use einsummable::{DType, Error, Result};
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
