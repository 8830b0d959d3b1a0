//! `ulysses`: DeepSpeed-Ulysses sequence parallelism.

use crate::baselines::{ATTENTION, HEADS_KV, Want, data_rule, largest_divisor, sequence_rows, solve_by_rule};
use crate::{Error, LogicalOptimizer, Problem, Result};

/// DeepSpeed-Ulysses (Jacobs et al. 2023): every operator outside attention is split by
/// tokens, as in [`Data`](crate::Data); attention is split by heads (`heads_kv`), so an
/// all-to-all repartition enters and leaves it.
///
/// Fallback: with fewer key/value heads than devices, attention takes `heads_kv = h`, the
/// largest divisor of `p` that is at most the head count, and splits its rows `p / h`
/// ways, by whole packed sequences when their number is a multiple of `p / h`, else by
/// query blocks. Operators outside attention follow the `data` rule and its fallback.
///
/// Errors: a graph without an attention operator has nothing for Ulysses to shard by
/// heads (it would be `data`), so it is refused with [`Error::Baseline`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Ulysses;

impl LogicalOptimizer for Ulysses {
    fn name(&self) -> &str {
        "ulysses"
    }

    fn solve(&self, problem: &Problem) -> Result<Vec<usize>> {
        if !problem.ops.iter().any(|op| op.kind == ATTENTION) {
            return Err(Error::Baseline {
                strategy: "ulysses",
                at: "the graph".into(),
                reason: "DeepSpeed-Ulysses splits attention by heads, and the graph has no attention operator \
                         (use `data` for a graph without attention)"
                    .into(),
            });
        }
        let p = problem.p;
        solve_by_rule("ulysses", problem, |op| {
            if op.kind != ATTENTION {
                return data_rule(op, p);
            }
            let heads = op.index_of(HEADS_KV).map_or(1, |i| largest_divisor(p, op.max_parts[i]));
            let mut wants = vec![Want::all(HEADS_KV)];
            wants.extend(sequence_rows(op, p / heads));
            wants
        })
    }
}
