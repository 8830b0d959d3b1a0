//! A strategy defined outside the workspace, compared in one of the paper's experiments.
//!
//! Experiments take strategies as values (`einsummable::experiment::Strategy`): the
//! project's own come from constructors such as `Strategy::dp()`, and any other
//! `LogicalOptimizer` enters through `Strategy::new` and `Setup::with_strategy`. Here
//! `CheapestSpec` takes, for every operator, the candidate whose own cost is least, ignoring
//! what repartitions between operators cost; the example runs the `chains` experiment
//! (shrunk, on 2 devices of a DGX A100) with it as one more column beside the DP and the
//! baselines, and prints each chain's predicted time under both.
//!
//! `cargo run --release --example experiment_strategy`

use std::sync::Arc;

use einsum_logical::{LogicalOptimizer, OpProblem, Problem, Result};
use einsummable::experiment::{Cell, Experiment, Runner, Setup, Strategy};

/// Every operator's cheapest candidate by its own cost (join, aggregation and compute).
struct CheapestSpec;

impl LogicalOptimizer for CheapestSpec {
    fn name(&self) -> &str {
        "cheapest-spec"
    }

    fn solve(&self, problem: &Problem) -> Result<Vec<usize>> {
        let cheapest = |op: &OpProblem| {
            let total = |c: usize| op.candidates[c].cost.total();
            (0..op.candidates.len()).min_by(|&a, &b| total(a).total_cmp(&total(b))).unwrap_or(0)
        };
        // Within the problem's memory budget, as every searching strategy plans.
        let choice: Vec<usize> = problem.ops.iter().map(cheapest).collect();
        Ok(problem.repair(&choice))
    }
}

fn main() -> einsummable::Result<()> {
    let out = std::env::temp_dir().join(format!("einsummable-experiment-strategy-{}", std::process::id()));
    let setup =
        Setup::named("dgx-a100", vec![2], out.clone(), true)?.with_strategy(Strategy::new(Arc::new(CheapestSpec)));
    let outcome = Experiment::Chains.run(&setup, &mut Runner::quiet())?;
    let table = &outcome.table;
    print!("{}", table.to_markdown());
    let column = |name: &str| table.columns.iter().position(|c| c == name).expect("a strategy's column");
    let (dp, mine) = (column("dp"), column("cheapest-spec"));
    assert_eq!(mine, table.columns.len() - 1, "the setup's strategies come after the project's");
    for row in &table.rows {
        let Cell::Value(ms) = row[mine] else { panic!("cheapest-spec has no plan for {}", table.row_label(row)) };
        let dp_ms = row[dp].value().map_or("n/a".into(), |v| format!("{v:.4}"));
        println!("{}: cheapest-spec {ms:.4} ms, dp {dp_ms} ms", table.row_label(row));
    }
    let _ = std::fs::remove_dir_all(&out);
    Ok(())
}

/// `cargo test` runs the example once (it is built with the test harness, `test = true`).
#[test]
fn the_experiment_compares_the_users_strategy() {
    main().unwrap();
}
