//! The `einsummable` command line. Every command takes `--json`: stdout then holds exactly
//! one JSON object, and human text and errors go to stderr. The exit code is 0 only on
//! success.

use std::process::ExitCode;

use clap::{ArgAction, Parser, Subcommand};
use cli::{ErrorJson, HelpJson, to_json};

mod cli;

/// Automatic multi-device parallelism for AI computations (join-agg specs).
#[derive(Parser)]
#[command(name = "einsummable", version)]
struct Cli {
    /// Print one JSON object on stdout instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// Log the pipeline's stages on stderr: -v for each stage's outcome, -vv for every
    /// operator and exchange program, -vvv for everything.
    #[arg(short, long, global = true, action = ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs every operator of a workload decomposed over P devices by each of its join-agg
    /// specs, and the whole graph under a random spec per operator, against the
    /// single-device reference on random data.
    Check(cli::check::Args),
    /// Chooses a join-agg spec for every operator of a workload (the logical plan), prints
    /// each operator's split and cost, and compiles the plan (without running it) for its
    /// predicted time and bytes moved.
    Plan(cli::plan::Args),
    /// Lists every join-agg spec each operator of a workload offers on P devices.
    Specs(cli::specs::Args),
    /// Compiles a workload (logical plan, exchange programs, task graph) and runs it on the
    /// backend with random inputs; `--check` compares with the single-device reference.
    Run(cli::run::RunArgs),
    /// Prints how a workload would run: its plan, exchange programs and task-graph
    /// statistics.
    Explain(cli::run::ExplainArgs),
    /// Generates tokens after prompts with a Hugging Face model (hf:DIR): the prefill and the
    /// decode step planned once each, the decode step run token by token over a KV cache.
    Generate(cli::generate::Args),
    /// Reproduces an experiment in simulation (Section 6's transformer, chains, ablation,
    /// exchange and proxy; fit, budget, scale, decode; or all), writing DIR/NAME.csv, .md and
    /// .svg.
    Experiment(cli::experiment::Args),
    /// Exchange programs: check, simulate or synthesize an ExProg file.
    #[command(subcommand)]
    Exprog(cli::exprog::Command),
}

fn main() -> ExitCode {
    // Before any thread starts: an interrupt removes the temporary files of outputs being
    // written (`--dump`, `--dot`, `experiment --out`) before the process ends by it.
    if let Err(e) = einsum_core::temporary::remove_temporaries_on_signals() {
        eprintln!("warning: interrupts may leave temporary files behind: {e}");
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help and version: with --json, the text as one JSON object.
        Err(e) if !e.use_stderr() && json_asked() => {
            println!("{}", to_json(&HelpJson { help: e.render().to_string().trim_end() }));
            return ExitCode::SUCCESS;
        }
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            // Bad arguments: with --json, stdout still holds exactly one JSON object.
            if json_asked() {
                println!("{}", to_json(&ErrorJson { error: e.to_string().trim_end() }));
            }
            eprint!("{e}");
            return ExitCode::from(2);
        }
    };
    init_logs(cli.verbose);
    let report = match cli.command {
        Command::Check(args) => cli::check::run(args),
        Command::Plan(args) => cli::plan::run(args),
        Command::Specs(args) => cli::specs::run(args),
        Command::Run(args) => cli::run::run(args),
        Command::Explain(args) => cli::run::explain(args),
        Command::Generate(args) => cli::generate::run(args),
        Command::Experiment(args) => cli::experiment::run(args),
        Command::Exprog(command) => cli::exprog::run(command),
    };
    match report {
        Ok(report) => {
            if cli.json {
                if !report.json.is_empty() {
                    println!("{}", report.json);
                }
            } else {
                print!("{}", report.text);
            }
            if report.ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        Err(e) => {
            if cli.json {
                println!("{}", to_json(&ErrorJson { error: &e.to_string() }));
            }
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Sends the libraries' `tracing` events to stderr (stdout stays the report's): warnings
/// only by default, and each `-v` one level more.
fn init_logs(verbose: u8) {
    use tracing_subscriber::filter::LevelFilter;
    let level = match verbose {
        0 => LevelFilter::WARN,
        1 => LevelFilter::INFO,
        2 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    };
    tracing_subscriber::fmt().with_max_level(level).with_writer(std::io::stderr).without_time().init();
}

/// Whether `--json` is among the arguments, read before (or without) parsing them. They are
/// read as OS strings: one that is not UTF-8 must not panic here (clap reports it as the
/// error).
fn json_asked() -> bool {
    std::env::args_os().skip(1).any(|a| a == "--json")
}
