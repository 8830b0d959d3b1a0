//! A logical optimizer defined outside the workspace, plugged into `compile` as a value.
//!
//! `Annealing` is simulated annealing over the plan: it starts from the greedy choice, proposes
//! switching one operator to another candidate spec, and accepts by the Metropolis rule on
//! `Problem::total`, within the problem's memory budget. Nothing in the library knows it:
//! `CompileOptions::optimizer` takes any `LogicalOptimizer`. The example compiles a small
//! LLaMA block for 4 CPU devices with it, runs it on random inputs, checks the outputs against
//! the single-device reference, and prints its plan's cost beside the DP's.
//!
//! `cargo run --release --example custom_optimizer`

use std::sync::Arc;

use einsum_core::{SeededRng, scaled_error};
use einsum_logical::{Greedy, LogicalOptimizer, Problem, Result};
use einsummable::{CompileOptions, DType, Workload, compile};

const BLOCK: &str = "llama-block:tokens=256,seqs=2,d_model=128,heads_q=8,heads_kv=4,d_head=16,d_ff=384";

/// Simulated annealing over each operator's candidate specs.
struct Annealing {
    /// Proposals to make.
    iterations: usize,
    /// Seed of the proposals and acceptance draws.
    seed: u64,
}

impl Annealing {
    fn new(iterations: usize, seed: u64) -> Self {
        Self { iterations, seed }
    }
}

impl LogicalOptimizer for Annealing {
    fn name(&self) -> &str {
        "annealing"
    }

    fn solve(&self, problem: &Problem) -> Result<Vec<usize>> {
        // Start from the greedy plan, brought within the memory budget.
        let mut current = problem.repair(&Greedy.solve(problem)?);
        let mut cost = problem.total(&current)?;
        let (mut best, mut best_cost) = (current.clone(), cost);
        let mut rng = SeededRng::new(self.seed);
        // Geometric cooling from a tenth of the start's cost to a thousandth of that.
        let start = 0.1 * cost.max(f64::MIN_POSITIVE);
        let cooling = 1e-3f64.powf(1.0 / self.iterations.max(1) as f64);
        let mut temperature = start;
        let switchable: Vec<usize> = (0..problem.ops.len()).filter(|&i| problem.ops[i].candidates.len() > 1).collect();
        for _ in 0..self.iterations {
            temperature *= cooling;
            if switchable.is_empty() {
                break;
            }
            // One operator switches to another of its candidates.
            let op = switchable[rng.below(switchable.len())];
            let n = problem.ops[op].candidates.len();
            let mut proposal = current.clone();
            proposal[op] = (current[op] + 1 + rng.below(n - 1)) % n;
            if !problem.fits(&proposal) {
                continue;
            }
            let proposed = problem.total(&proposal)?;
            let delta = proposed - cost;
            if delta <= 0.0 || rng.unit() < (-delta / temperature).exp() {
                (current, cost) = (proposal, proposed);
                if cost < best_cost {
                    (best, best_cost) = (current.clone(), cost);
                }
            }
        }
        Ok(best)
    }
}

fn main() -> einsummable::Result<()> {
    let graph = Workload::parse(BLOCK)?.build(DType::F32)?;
    let options = CompileOptions::default().devices(4);
    let annealed = options.clone().optimizer(Arc::new(Annealing::new(2000, 7)));
    let mut exe = compile(&graph, &annealed)?;
    exe.load_random(1)?;
    exe.execute()?;
    let reference = graph.computation().evaluate(&exe.loaded_inputs())?;
    let error = reference.iter().map(|(t, r)| scaled_error(&exe.outputs()[t], r, 1.0)).fold(0.0f32, f32::max);
    let dp = compile(&graph, &options)?;
    let (plan, dp_plan) = (exe.plan(), dp.plan());
    assert_eq!(plan.optimizer, "annealing");
    println!("{BLOCK} on 4 CPU devices");
    println!("  annealing: {:.6e} {} (predicted {:.4} ms)", plan.total, plan.unit, exe.predicted_ms());
    println!("  dp:        {:.6e} {} (predicted {:.4} ms)", dp_plan.total, dp_plan.unit, dp.predicted_ms());
    println!("  max error against the single-device reference: {error:.3e}");
    assert!(error <= 1e-4, "the annealed plan computes a different result: error {error}");
    Ok(())
}

/// `cargo test` runs the example once (it is built with the test harness, `test = true`).
#[test]
fn the_annealed_plan_runs_correctly() {
    main().unwrap();
}
