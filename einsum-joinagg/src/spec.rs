//! Function specs and join-agg specs (Definitions 3.5 and 3.6).

use einsum_core::{FastMap, FastSet, TensorType};

/// One function specification `T̂(i1) × T̂(i2) × ... → T̂(o1) × ...`: the input blocks one
/// concrete-operator call reads and the output blocks it produces, in absolute coordinates.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FunctionSpec {
    /// One projection of each operator input.
    pub inputs: Vec<TensorType>,
    /// One projection of each operator output.
    pub outputs: Vec<TensorType>,
}

/// A join-agg spec: the function specs that run, one per device.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JoinAggSpec {
    /// The function specs, in the order of the interval combinations that produced them
    /// (first shardable index slowest).
    pub functions: Vec<FunctionSpec>,
}

impl JoinAggSpec {
    /// Number of function specs (`p`).
    pub fn len(&self) -> usize {
        self.functions.len()
    }

    /// True for a spec with no function spec.
    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }

    /// The distinct boxes of output `j`, in first-appearance order: `out(J)` of Section 4.2.
    pub fn output_blocks(&self, j: usize) -> Vec<TensorType> {
        distinct(self.functions.iter().map(|f| &f.outputs[j]))
    }

    /// The distinct boxes of input `k`: `in_k(J)` of Section 4.3.
    pub fn input_blocks(&self, k: usize) -> Vec<TensorType> {
        distinct(self.functions.iter().map(|f| &f.inputs[k]))
    }

    /// How many function specs produce each distinct box of output `j`, in order of first
    /// appearance.
    pub fn output_multiplicities(&self, j: usize) -> Vec<(TensorType, usize)> {
        multiplicities(self.functions.iter().map(|f| &f.outputs[j]))
    }

    /// How many function specs read each distinct block of input `k`, in order of first
    /// appearance.
    pub fn input_multiplicities(&self, k: usize) -> Vec<(TensorType, usize)> {
        multiplicities(self.functions.iter().map(|f| &f.inputs[k]))
    }
}

fn distinct<'a>(boxes: impl Iterator<Item = &'a TensorType>) -> Vec<TensorType> {
    let mut seen = FastSet::default();
    boxes.filter(|b| seen.insert(*b)).cloned().collect()
}

/// Each distinct block of `blocks` with how many times it occurs, in order of first
/// appearance (the index keeps this linear in the blocks).
fn multiplicities<'a>(blocks: impl Iterator<Item = &'a TensorType>) -> Vec<(TensorType, usize)> {
    let mut out: Vec<(TensorType, usize)> = Vec::new();
    let mut at: FastMap<&TensorType, usize> = FastMap::default();
    for b in blocks {
        match at.get(b) {
            Some(&i) => out[i].1 += 1,
            None => {
                at.insert(b, out.len());
                out.push((b.clone(), 1));
            }
        }
    }
    out
}
