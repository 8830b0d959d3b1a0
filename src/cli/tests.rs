//! The command line's names and defaults: every older spelling of a flag parses as its name,
//! and every default is the library's constant, so that the two cannot drift apart.

use clap::{ArgMatches, CommandFactory, Parser};

use super::SynthesizerName;

/// The commands whose arguments are tested, as the binary nests them.
#[derive(Parser)]
enum Commands {
    Plan(super::plan::Args),
    Run(super::run::RunArgs),
    Explain(super::run::ExplainArgs),
    Specs(super::specs::Args),
    Check(super::check::Args),
    #[command(subcommand)]
    Exprog(super::exprog::Command),
}

/// The matches of the innermost subcommand of `args` (the program name left out).
fn parse(args: &[&str]) -> ArgMatches {
    let mut matches = Commands::command()
        .try_get_matches_from(std::iter::once("einsummable").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    while let Some((_, sub)) = matches.remove_subcommand() {
        matches = sub;
    }
    matches
}

/// The parsed value of `id` in `args`.
fn value<T: Clone + Send + Sync + 'static>(args: &[&str], id: &str) -> T {
    parse(args).get_one::<T>(id).unwrap_or_else(|| panic!("{args:?}: no {id}")).clone()
}

/// Each compiling command with its positional arguments.
const COMPILING: [&[&str]; 4] =
    [&["plan", "matmul:n=64"], &["run"], &["explain"], &["exprog", "synthesize", "x.exprog", "--topology", "dgx-a100"]];

#[test]
fn every_older_spelling_of_the_synthesizer_parses_as_synthesizer() {
    for command in COMPILING {
        let exprog = command[0] == "exprog";
        let olds: &[&str] = if exprog { &["--mode", "--schedule"] } else { &["--schedule"] };
        // Each command's non-default value, so that a flag that were ignored would fail.
        let (name, expected) =
            if exprog { ("naive", SynthesizerName::Naive) } else { ("search", SynthesizerName::Search) };
        let with = |flag: &str| value::<SynthesizerName>(&[command, &[flag, name]].concat(), "synthesizer");
        assert_eq!(with("--synthesizer"), expected, "{command:?}");
        for old in olds {
            assert_eq!(with(old), expected, "{command:?} {old}");
        }
        let default = if exprog { SynthesizerName::Search } else { SynthesizerName::Naive };
        assert_eq!(value::<SynthesizerName>(command, "synthesizer"), default, "{command:?}");
    }
}

#[test]
fn the_search_defaults_are_the_librarys() {
    for command in COMPILING {
        assert_eq!(value::<usize>(command, "iterations"), einsummable::DEFAULT_SEARCH_ITERATIONS, "{command:?}");
        assert_eq!(
            value::<f64>(command, "synthesis_budget"),
            einsummable::DEFAULT_SYNTHESIS_BUDGET.as_secs_f64(),
            "{command:?}"
        );
    }
    let library = einsummable::SearchSynthesizer::default();
    assert_eq!(library.iterations, einsum_exprog::synth::SearchOptions::default().iterations);
    assert_eq!(library.budget, Some(einsummable::DEFAULT_SYNTHESIS_BUDGET));
}

#[test]
fn the_compile_defaults_are_the_librarys() {
    let planning: [&[&str]; 5] =
        [&["plan", "matmul:n=64"], &["run"], &["explain"], &["specs", "matmul:n=64"], &["check", "matmul:n=64"]];
    for command in planning {
        assert_eq!(value::<usize>(command, "devices"), einsummable::DEFAULT_DEVICES, "{command:?}");
    }
    for command in &COMPILING[..3] {
        assert_eq!(value::<String>(command, "optimizer"), einsummable::names::DEFAULT_OPTIMIZER, "{command:?}");
        assert_eq!(value::<String>(command, "cost"), einsummable::names::DEFAULT_COST_MODEL, "{command:?}");
    }
    let defaults = einsummable::CompileOptions::default();
    assert_eq!(defaults.devices, einsummable::DEFAULT_DEVICES);
    assert_eq!(defaults.topology, einsum_sim::Topology::preset(super::DEFAULT_TOPOLOGY).unwrap());
}
