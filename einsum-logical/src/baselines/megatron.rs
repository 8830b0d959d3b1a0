//! `megatron`: Megatron-LM tensor parallelism with sequence parallelism.

use crate::baselines::{Want, data_rule, is_attention, largest_divisor, sequence_rows, solve_by_rule, want_all};
use crate::{Error, IndexRole, LogicalOptimizer, Problem, Result};
#[cfg(doc)]
use einsum_joinagg::OpRole;

/// The roles of the tensor-parallel regions, in the order an operator's first one is
/// looked for.
const PARALLEL: [IndexRole; 3] = [IndexRole::HeadsKv, IndexRole::HeadsQ, IndexRole::FfnHidden];

/// Megatron-LM tensor parallelism (Shoeybi et al. 2019) with the sequence parallelism of
/// Korthikanti et al. 2023 outside the tensor-parallel regions.
///
/// The rule, per operator on `p` devices, by the roles of its indices:
/// - the q/k/v projections are column-parallel over heads ([`IndexRole::HeadsQ`],
///   [`IndexRole::HeadsKv`]), and so is RoPE on their outputs; attention
///   ([`OpRole::Attention`]) is split over key/value heads; the output projection is
///   row-parallel: it contracts the query heads, split, so its partial outputs are
///   aggregated (Megatron's all-reduce, here a reduce into the next tiling);
/// - the FFN gate and up projections are column-parallel over the FFN hidden index
///   ([`IndexRole::FfnHidden`]), the activation and gating products stay split over it,
///   and the down projection is row-parallel over it (aggregation);
/// - everything else (norms, residual adds, other elementwise operators) is split by
///   tokens ([`IndexRole::Tokens`]): join-agg specs have exactly `p` function specs and
///   cannot replicate compute the way Megatron without sequence parallelism does, which is
///   exactly what sequence parallelism changes.
///
/// An operator with several of these roles is treated by the first it has of key/value
/// heads, query heads, FFN hidden.
///
/// Fallback: with `H` key/value heads and `h` the largest divisor of `p` that is at most
/// `H`, every head index is split at most `h` ways (so the query-head operators' tilings
/// line up with attention's head groups), and the remaining factor `p / h` goes to the
/// rows: tokens, or for attention whole packed sequences when their number is a multiple
/// of `p / h`, else query blocks. An index that cannot take its share (an FFN hidden
/// extent smaller than `p`) gives the remainder to tokens, then to the output dimensions,
/// then to the other indices. Operators with none of the three roles follow the
/// [`Data`](crate::Data) rule.
///
/// Errors: a graph where no operator has a head or FFN hidden index (a matrix chain, or a
/// graph that declares no roles) has no tensor-parallel region, so it is refused with
/// [`Error::Baseline`], naming the roles it looked for.
#[derive(Clone, Copy, Debug, Default)]
pub struct Megatron;

impl LogicalOptimizer for Megatron {
    fn name(&self) -> &str {
        "megatron"
    }

    fn solve(&self, problem: &Problem) -> Result<Vec<usize>> {
        if !problem.ops.iter().any(|op| PARALLEL.iter().any(|&r| op.position_with_role(r).is_some())) {
            return Err(Error::Baseline {
                strategy: "megatron",
                at: "the graph".into(),
                reason: "Megatron splits the indices with roles `heads_kv`, `heads_q` (attention heads) and \
                         `ffn_hidden` (the FFN hidden index), and no operator has one (declare them with \
                         `Graph::role`, or use `data` or `mesh2d` for this graph)"
                    .into(),
            });
        }
        let p = problem.p;
        // The head split every head index shares: attention's, limited by its head count.
        let heads = problem
            .ops
            .iter()
            .filter(|op| is_attention(op))
            .filter_map(|op| op.position_with_role(IndexRole::HeadsKv).map(|i| op.max_parts[i]))
            .min()
            .map_or(p, |kv| largest_divisor(p, kv));
        solve_by_rule("megatron", problem, |op| {
            if is_attention(op) {
                let mut wants: Vec<Want> =
                    op.index_with_role(IndexRole::HeadsKv).map(|kv| Want::at_most(kv, heads)).into_iter().collect();
                wants.extend(sequence_rows(op, p / heads));
                return wants;
            }
            let first = PARALLEL.iter().find_map(|&r| op.index_with_role(r).map(|name| (r, name)));
            let first = match first {
                Some((IndexRole::FfnHidden, ffn)) => Want::all(ffn),
                Some((_, head)) => Want::at_most(head, heads),
                None => return data_rule(op, p),
            };
            std::iter::once(first).chain(want_all(op, IndexRole::Tokens)).collect()
        })
    }
}
