//! `data`: PyTorch-style data parallelism.

use crate::baselines::{data_rule, solve_by_rule};
use crate::{LogicalOptimizer, Problem, Result};
#[cfg(doc)]
use einsum_joinagg::{IndexRole, OpRole};

/// Data parallelism as PyTorch runs it (Section 6, Experiment 1, "PyTorch-style"): weights
/// replicated, activations split by tokens.
///
/// The rule, per operator on `p` devices:
/// - an operator with a token index ([`IndexRole::Tokens`]) splits it `p` ways, so every
///   weight (which has no token dimension) is read whole by every device;
/// - attention ([`OpRole::Attention`]) splits its rows by whole packed sequences when their
///   number is a multiple of `p`, else into `p` query blocks ([`IndexRole::QueryBlocks`])
///   that each gather all keys and values;
/// - an operator without a token index (the matrix chains of Experiment 2, or any graph
///   that declares no roles) splits the row index of its output (the first dimension of
///   its first output): JAX/PyTorch row sharding.
///
/// Fallback: when the wanted index cannot take all of `p` (fewer tokens, sequences or rows
/// than devices), it takes the largest divisor of `p` it can hold and the remaining factor
/// goes to the next index in this order: attention's other row index (query blocks or
/// sequences), the operator's output dimensions in order, then its other shardable
/// indices (contractions last, which aggregate).
#[derive(Clone, Copy, Debug, Default)]
pub struct Data;

impl LogicalOptimizer for Data {
    fn name(&self) -> &str {
        "data"
    }

    fn solve(&self, problem: &Problem) -> Result<Vec<usize>> {
        solve_by_rule("data", problem, |op| data_rule(op, problem.p))
    }
}
