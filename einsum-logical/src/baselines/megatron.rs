//! `megatron`: Megatron-LM tensor parallelism with sequence parallelism.

use crate::baselines::{
    ATTENTION, D_FF, HEADS_KV, HEADS_Q, TOKENS, Want, data_rule, largest_divisor, sequence_rows, solve_by_rule,
};
use crate::{Error, LogicalOptimizer, Problem, Result};

/// Megatron-LM tensor parallelism (Shoeybi et al. 2019) with the sequence parallelism of
/// Korthikanti et al. 2023 outside the tensor-parallel regions.
///
/// The rule, per operator on `p` devices:
/// - the q/k/v projections are column-parallel over heads (`heads_q`, `heads_kv`), and so
///   is RoPE on their outputs; attention is split over key/value heads (`heads_kv`); the
///   output projection is row-parallel: it contracts `heads_q`, split, so its partial
///   outputs are aggregated (Megatron's all-reduce, here a reduce into the next tiling);
/// - the FFN gate and up projections are column-parallel over `d_ff`, the activation and
///   gating products stay split over `d_ff`, and the down projection is row-parallel over
///   `d_ff` (aggregation);
/// - everything else (norms, residual adds, other elementwise operators) is split by
///   `tokens`: join-agg specs have exactly `p` function specs and cannot replicate compute
///   the way Megatron without sequence parallelism does, which is exactly what sequence
///   parallelism changes.
///
/// Fallback: with `H` key/value heads and `h` the largest divisor of `p` that is at most
/// `H`, every head index is split at most `h` ways (so the query-head operators' tilings
/// line up with attention's head groups), and the remaining factor `p / h` goes to the
/// rows: `tokens`, or for attention whole packed sequences when their number is a multiple
/// of `p / h`, else query blocks. An index that cannot take its share (`d_ff` smaller than
/// `p`) gives the remainder to `tokens`, then to the output dimensions, then to the other
/// indices. Operators without a head or `d_ff` index follow the [`Data`](crate::Data) rule.
///
/// Errors: a graph with no `heads_q`, `heads_kv` or `d_ff` index (a matrix chain) has no
/// tensor-parallel region, so it is refused with [`Error::Baseline`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Megatron;

impl LogicalOptimizer for Megatron {
    fn name(&self) -> &str {
        "megatron"
    }

    fn solve(&self, problem: &Problem) -> Result<Vec<usize>> {
        let parallel = [HEADS_KV, HEADS_Q, D_FF];
        if !problem.ops.iter().any(|op| parallel.iter().any(|i| op.index_of(i).is_some())) {
            return Err(Error::Baseline {
                strategy: "megatron",
                at: "the graph".into(),
                reason: "Megatron splits attention heads (`heads_q`, `heads_kv`) and the FFN hidden index (`d_ff`), \
                         and no operator has one (use `data` or `mesh2d` for this graph)"
                    .into(),
            });
        }
        let p = problem.p;
        // The head split every head index shares: attention's, limited by its head count.
        let heads = problem
            .ops
            .iter()
            .filter(|op| op.kind == ATTENTION)
            .filter_map(|op| op.index_of(HEADS_KV).map(|i| op.max_parts[i]))
            .min()
            .map_or(p, |kv| largest_divisor(p, kv));
        solve_by_rule("megatron", problem, |op| {
            if op.kind == ATTENTION {
                let mut wants = vec![Want::at_most(HEADS_KV, heads)];
                wants.extend(sequence_rows(op, p / heads));
                return wants;
            }
            match parallel.iter().find(|i| op.index_of(i).is_some()) {
                Some(&D_FF) => vec![Want::all(D_FF), Want::all(TOKENS)],
                Some(head) => vec![Want::at_most(head, heads), Want::all(TOKENS)],
                None => data_rule(op, p),
            }
        })
    }
}
