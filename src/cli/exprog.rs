//! `einsummable exprog`: check, simulate and synthesize exchange programs (Section 5).

use einsum_exprog::{
    Membership, load, load_valid, simulate,
    synth::{self, SearchOptions},
};
use einsum_sim::{PCIE_BRIDGE, Topology};
use einsummable::{Error, Result};
use serde_json::{Value, json};

use super::{Report, Synthesis};

/// The `exprog` subcommands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Parses a program, runs the static checks and decides validity (Definition 5.5),
    /// choosing the membership of partitions declared by size.
    Check {
        /// The `.exprog` file.
        file: String,
    },
    /// Simulates a program on a topology and reports its completion time.
    Simulate {
        /// The `.exprog` file.
        file: String,
        /// A preset (dgx-a100, dgx-h100, dgx-v100) or a topology file.
        #[arg(long)]
        topology: String,
    },
    /// Synthesizes a body for a program's preamble (its GPUS, PARTITIONS, IN and OUT).
    Synthesize {
        /// The `.exprog` file (its body, if any, seeds the search).
        file: String,
        /// A preset (dgx-a100, dgx-h100, dgx-v100) or a topology file.
        #[arg(long)]
        topology: String,
        /// How the body is synthesized.
        #[arg(long, value_enum, default_value_t = Synthesis::Search)]
        mode: Synthesis,
        /// Seed of the search.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Iterations of the search.
        #[arg(long, default_value_t = SearchOptions::default().iterations)]
        iterations: usize,
    },
}

/// Runs an `exprog` subcommand.
pub fn run(command: Command) -> Result<Report> {
    match command {
        Command::Check { file } => {
            let (program, validation) = load_valid(&read(&file)?)?;
            let text = format!(
                "{file}: valid; {} actions; membership {}\n",
                program.body.len(),
                membership_text(&validation.membership)
            );
            let json = json!({
                "file": file, "valid": true, "actions": program.body.len(),
                "membership": membership_json(&validation.membership),
            });
            Ok(Report { json, text, ok: true })
        }
        Command::Simulate { file, topology } => {
            let program = load(&read(&file)?)?;
            let topo = Topology::named(&topology)?;
            let sim = simulate(&program, &topo)?;
            let bridge = sim.trace.bytes_through(PCIE_BRIDGE);
            let mut text = format!(
                "{file} on {topology}: {} ms ({} ms of transfers), membership {}\n",
                round(sim.completion_ms),
                round(sim.transfer_ms),
                membership_text(&sim.membership)
            );
            if let Some(reason) = &sim.invalid {
                text += &format!("INVALID: {reason}\n");
            }
            let json = json!({
                "file": file, "topology": topology, "valid": sim.valid,
                "invalid": sim.invalid.as_ref().map(|e| e.to_string()),
                "completion_ms": sim.completion_ms, "transfer_ms": sim.transfer_ms,
                "membership": membership_json(&sim.membership), "bridge_bytes": bridge,
            });
            Ok(Report { json, text, ok: sim.valid })
        }
        Command::Synthesize { file, topology, mode, seed, iterations } => {
            let preamble = load(&read(&file)?)?;
            let topo = Topology::named(&topology)?;
            let (program, completion_ms, membership, extra) = match mode {
                Synthesis::Naive => {
                    let program = synth::naive(&preamble)?;
                    let sim = simulate(&program, &topo)?;
                    (program, sim.completion_ms, sim.membership, json!({}))
                }
                Synthesis::Search => {
                    let options = SearchOptions { seed, iterations, ..SearchOptions::default() };
                    let s = synth::search(&preamble, &topo, options)?;
                    let extra = json!({"naive_ms": s.naive_ms, "evaluated": s.evaluated, "origin": s.origin});
                    (s.program, s.completion_ms, s.membership, extra)
                }
            };
            let text = format!(
                "# {mode} synthesis on {topology}: {} ms, membership {}\n{program}\n",
                round(completion_ms),
                membership_text(&membership)
            );
            let mut json = json!({
                "file": file, "topology": topology, "mode": mode.name(), "completion_ms": completion_ms,
                "membership": membership_json(&membership), "program": program.to_string(),
            });
            if let (Value::Object(out), Value::Object(more)) = (&mut json, extra) {
                out.extend(more);
            }
            Ok(Report { json, text, ok: true })
        }
    }
}

fn read(path: &str) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::Io { path: path.to_string(), message: e.to_string() })
}

fn round(ms: f64) -> String {
    format!("{ms:.3}")
}

fn membership_json(m: &Membership) -> Value {
    m.0.iter()
        .map(|(name, sites)| (name.as_str().to_string(), json!(sites.iter().map(|s| s.0).collect::<Vec<_>>())))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn membership_text(m: &Membership) -> String {
    if m.0.is_empty() { "(no partitions)".to_string() } else { m.to_string() }
}
