//! Building specs for operators whose tensor dimensions each follow one index.
//!
//! Most operators (einsum, elementwise, norms, reductions) decompose the same way: pick one
//! interval per shardable index, and every tensor dimension that follows an index takes that
//! index's interval, all others stay whole. [`grid_spec`] builds such a spec.

use einsum_core::{Interval, TensorDesc, TensorType};

use crate::{Error, FunctionSpec, JoinAggSpec, Result, ShardableIndex};

/// For every tensor (inputs, then outputs) and every dimension, the shardable index that
/// dimension follows, or `None` when it is never split.
pub type DimIndex = Vec<Vec<Option<usize>>>;

/// Every combination of one interval per index, the first index varying slowest.
pub fn combinations(intervals: &[Vec<Interval>]) -> Vec<Vec<Interval>> {
    let mut out = vec![Vec::new()];
    for ivs in intervals {
        out = out
            .into_iter()
            .flat_map(|prefix: Vec<Interval>| {
                ivs.iter().map(move |iv| {
                    let mut c = prefix.clone();
                    c.push(*iv);
                    c
                })
            })
            .collect();
    }
    out
}

/// Checks a spec request against the operator's shardable indices: one interval list per
/// index, each a valid decomposition.
pub fn check_request(op: &str, shardable: &[ShardableIndex], intervals: &[Vec<Interval>]) -> Result<()> {
    if intervals.len() != shardable.len() {
        return Err(Error::Invalid {
            op: op.to_string(),
            reason: format!(
                "spec request has {} interval lists for {} shardable indices",
                intervals.len(),
                shardable.len()
            ),
        });
    }
    for (s, ivs) in shardable.iter().zip(intervals) {
        s.check_intervals(ivs).map_err(|reason| Error::BadIntervals {
            op: op.to_string(),
            index: s.name.clone(),
            reason,
        })?;
    }
    Ok(())
}

/// The spec of an operator whose dimensions follow indices as `dims` says: one function
/// spec per combination of intervals (see [`combinations`]).
pub fn grid_spec(
    op: &str,
    inputs: &[TensorDesc],
    outputs: &[TensorDesc],
    shardable: &[ShardableIndex],
    dims: &DimIndex,
    intervals: &[Vec<Interval>],
) -> Result<JoinAggSpec> {
    check_request(op, shardable, intervals)?;
    let tensors: Vec<&TensorDesc> = inputs.iter().chain(outputs).collect();
    let boxed = |t: usize, combo: &[Interval]| -> TensorType {
        TensorType::from_intervals(
            tensors[t]
                .dims
                .iter()
                .zip(&dims[t])
                .map(|(d, idx)| idx.map_or(Interval::full(d.extent), |s| combo[s]))
                .collect(),
        )
    };
    let functions = combinations(intervals)
        .iter()
        .map(|combo| FunctionSpec {
            inputs: (0..inputs.len()).map(|t| boxed(t, combo)).collect(),
            outputs: (inputs.len()..tensors.len()).map(|t| boxed(t, combo)).collect(),
        })
        .collect();
    Ok(JoinAggSpec { functions })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combinations_are_row_major() {
        let a = vec![Interval { lo: 0, hi: 1 }, Interval { lo: 1, hi: 2 }];
        let b = vec![Interval { lo: 0, hi: 5 }, Interval { lo: 5, hi: 9 }];
        let c = combinations(&[a.clone(), b.clone()]);
        assert_eq!(c, vec![vec![a[0], b[0]], vec![a[0], b[1]], vec![a[1], b[0]], vec![a[1], b[1]]]);
        assert_eq!(combinations(&[]), vec![Vec::<Interval>::new()]);
    }
}
