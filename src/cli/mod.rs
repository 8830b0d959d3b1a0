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

/// `name: about; ...` for a table's entries.
fn listed<'a>(entries: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    entries.map(|(name, about)| format!("{name}: {about}")).collect::<Vec<_>>().join("; ")
}

/// The help of `--optimizer`, from the [`einsum_logical::optimizers`] table.
pub fn optimizer_help() -> String {
    format!("The logical optimizer: {}", listed(einsum_logical::optimizers().iter().map(|e| (e.name, e.about))))
}

/// The help of `--cost`, from the [`einsum_logical::cost_models`] table.
pub fn cost_help() -> String {
    format!("The cost model: {}", listed(einsum_logical::cost_models().iter().map(|e| (e.name, e.about))))
}

/// The help of `--backend`, from the [`einsummable::backends`] table.
pub fn backend_help() -> String {
    format!("The backend: {}", listed(einsummable::backends().iter().map(|e| (e.name, e.about))))
}

/// The help of `--topology`, from the [`einsum_sim::PRESETS`] table; `what` says what it is for.
pub fn topology_help(what: &str) -> String {
    format!("A topology preset ({}) or a topology file: {what}", einsum_sim::PRESETS.join(", "))
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
