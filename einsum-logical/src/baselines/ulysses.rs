//! `ulysses`: DeepSpeed-Ulysses sequence parallelism.

use crate::baselines::{Want, data_rule, is_attention, largest_divisor, sequence_rows, solve_by_rule};
use crate::{Error, IndexRole, LogicalOptimizer, Problem, Result};
#[cfg(doc)]
use einsum_joinagg::OpRole;

/// DeepSpeed-Ulysses (Jacobs et al. 2023): every operator outside attention is split by
/// tokens, as in [`Data`](crate::Data); attention ([`OpRole::Attention`]) is split by its
/// key/value heads ([`IndexRole::HeadsKv`]), so an all-to-all repartition enters and
/// leaves it.
///
/// Fallback: with fewer key/value heads than devices, attention takes `heads_kv = h`, the
/// largest divisor of `p` that is at most the head count, and splits its rows `p / h`
/// ways, by whole packed sequences when their number is a multiple of `p / h`, else by
/// query blocks. Operators outside attention follow the `data` rule and its fallback.
///
/// Errors: a graph without an attention operator (none declares [`OpRole::Attention`]) has
/// nothing for Ulysses to shard by heads (it would be `data`), so it is refused with
/// [`Error::Baseline`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Ulysses;

impl LogicalOptimizer for Ulysses {
    fn name(&self) -> &str {
        "ulysses"
    }

    fn solve(&self, problem: &Problem) -> Result<Vec<usize>> {
        if !problem.ops.iter().any(is_attention) {
            return Err(Error::Baseline {
                strategy: "ulysses",
                at: "the graph".into(),
                reason: "DeepSpeed-Ulysses splits attention by heads, and the graph has no attention operator \
                         (no operator declares the `attention` role; use `data` for a graph without attention)"
                    .into(),
            });
        }
        let p = problem.p;
        solve_by_rule("ulysses", problem, |op| {
            if !is_attention(op) {
                return data_rule(op, p);
            }
            let kv = op.position_with_role(IndexRole::HeadsKv);
            let heads = kv.map_or(1, |i| largest_divisor(p, op.max_parts[i]));
            let mut wants: Vec<Want> = kv.map(|i| Want::all(&op.shardable[i])).into_iter().collect();
            wants.extend(sequence_rows(op, p / heads));
            wants
        })
    }
}
