//! Tensors joined end to end along one named index, as `torch.cat` and
//! `numpy.concatenate` join them: the output's positions `0..n₀` are the first input's,
//! `n₀..n₀ + n₁` the second's, and so on (a key cache and the new keys, say).
//!
//! The inputs agree on every other index by name (not by position: each input may order
//! its indices its own way; the output takes the first input's order) and on dtype. Every
//! other index is shardable anywhere; the concatenated index stays whole in every block,
//! the simplest exact choice (a block of it would need only some of the inputs, and a
//! function spec names a block of every input).

use einsum_core::{HostTensor, Interval, KernelClass, TensorDesc, TensorType};
use einsum_joinagg::{AbstractOperator, DimIndex, Error, FunctionSpec, JoinAggSpec, Result, ShardableIndex, grid_spec};

use crate::common::{check_call, f32s, kernel_error, row_dims, row_shardable, split_rows};
use crate::einsum::permute;

const KIND: &str = "concat";

/// Two or more tensors concatenated along one index: the output has the first input's
/// indices in its order, the concatenated one of the inputs' summed extent, and their dtype.
#[derive(Clone, Debug)]
pub struct Concat {
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
    /// The position of the concatenated index in the output (and the first input).
    axis: usize,
}

impl Concat {
    /// `xs` joined along `index`. Fails with an [`Error::Shape`] naming the index at fault
    /// when an input lacks `index`, or an input's other indices differ from the first's in
    /// name or extent; and with [`Error::Invalid`] for fewer than two inputs, inputs of
    /// different dtypes, or i32 inputs (indices rather than values).
    pub fn new(xs: &[TensorDesc], index: &str) -> Result<Concat> {
        let invalid = |reason: String| Error::Invalid { op: KIND.into(), reason };
        let shape = |at: &str, reason: String| Error::Shape { op: KIND.into(), index: at.into(), reason };
        let [first, rest @ ..] = xs else {
            return Err(invalid("no input to concatenate".into()));
        };
        if rest.is_empty() {
            return Err(invalid(format!("one input [{}]: concatenate two or more", first.dims_string())));
        }
        let mut total = 0;
        for (k, x) in xs.iter().enumerate() {
            let axis = x
                .position(index)
                .ok_or_else(|| shape(index, format!("not an index of input {k} [{}]", x.dims_string())))?;
            total += x.dims[axis].extent;
            if x.dtype != first.dtype {
                return Err(invalid(format!("input {k} has dtype {}, input 0 has {}", x.dtype, first.dtype)));
            }
            if !x.dtype.is_float() {
                return Err(invalid(format!("the inputs have dtype {}, not a floating-point one", x.dtype)));
            }
            let mismatch = |at: &str| {
                shape(
                    at,
                    format!(
                        "input {k} [{}] and input 0 [{}] must agree on every index but `{index}`",
                        x.dims_string(),
                        first.dims_string()
                    ),
                )
            };
            for d in first.dims.iter().filter(|d| d.name != index) {
                if x.position(&d.name).is_none_or(|p| x.dims[p].extent != d.extent) {
                    return Err(mismatch(&d.name));
                }
            }
            if let Some(extra) = x.dims.iter().find(|d| first.position(&d.name).is_none()) {
                return Err(mismatch(&extra.name));
            }
        }
        let axis = first.position(index).expect("checked above");
        let mut y = first.clone();
        y.dims[axis].extent = total;
        Ok(Concat { inputs: xs.to_vec(), outputs: vec![y], axis })
    }

    /// The name of the concatenated index.
    pub fn index(&self) -> &str {
        &self.outputs[0].dims[self.axis].name
    }

    /// Where each input starts along the concatenated index of the output.
    pub fn offsets(&self) -> Vec<usize> {
        let index = self.index();
        let mut at = 0;
        self.inputs
            .iter()
            .map(|x| {
                let start = at;
                at += x.dims[x.position(index).expect("every input has the index")].extent;
                start
            })
            .collect()
    }

    /// For input `k`, the position in it of each output dimension (by name).
    fn order(&self, k: usize) -> Vec<usize> {
        let x = &self.inputs[k];
        self.outputs[0].dims.iter().map(|d| x.position(&d.name).expect("every input has every index")).collect()
    }
}

impl AbstractOperator for Concat {
    fn kind(&self) -> &str {
        KIND
    }

    fn kernel_class(&self) -> KernelClass {
        KernelClass::Copy
    }

    fn inputs(&self) -> &[TensorDesc] {
        &self.inputs
    }

    fn outputs(&self) -> &[TensorDesc] {
        &self.outputs
    }

    /// The output's indices but the concatenated one, in the output's order.
    fn shardable(&self) -> Vec<ShardableIndex> {
        row_shardable(&self.outputs[0], self.axis)
    }

    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
        let y = &self.outputs[0];
        let follows = row_dims(y.rank(), self.axis);
        let mut dims: DimIndex = (0..self.inputs.len())
            .map(|k| {
                let x = &self.inputs[k];
                x.dims.iter().map(|d| follows[y.position(&d.name).expect("same indices")]).collect()
            })
            .collect();
        dims.push(follows);
        grid_spec(KIND, &self.inputs, &self.outputs, &self.shardable(), &dims, intervals)
    }

    /// None: a concatenation moves bytes.
    fn flops(&self, _: &FunctionSpec) -> f64 {
        0.0
    }

    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        check_call(self, f, inputs)?;
        let y = &f.outputs[0];
        let total = self.outputs[0].dims[self.axis].extent;
        if y.dim(self.axis) != Interval::full(total) {
            return Err(kernel_error(KIND, format!("output block {y} does not hold the whole `{}`", self.index())));
        }
        let (outer, _, inner) = split_rows(&y.shape(), self.axis);
        let mut out = vec![0.0f32; y.volume()];
        for (k, ((block, x), start)) in f.inputs.iter().zip(inputs).zip(self.offsets()).enumerate() {
            let order = self.order(k);
            let n = self.inputs[k].dims[order[self.axis]].extent;
            // The block input k must be: the output block's box by name, whole along the index.
            let want = TensorType::from_intervals(
                (0..block.rank())
                    .map(|p| {
                        let at = order.iter().position(|&q| q == p).expect("a permutation");
                        if at == self.axis { Interval::full(n) } else { y.dim(at) }
                    })
                    .collect(),
            );
            if *block != want {
                return Err(kernel_error(KIND, format!("input {k} block {block} is not {want}, output block {y}'s")));
            }
            let data = permute(&f32s(x), &block.shape(), &order);
            for o in 0..outer {
                let src = &data[o * n * inner..][..n * inner];
                out[(o * total + start) * inner..][..n * inner].copy_from_slice(src);
            }
        }
        Ok(vec![HostTensor::from_f32(y.clone(), self.outputs[0].dtype, out)?])
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::DType;
    use einsum_joinagg::{decomposition_error, enumerate_specs, execute_whole};

    use super::*;

    fn desc(dims: &[(&str, usize)], dtype: DType) -> TensorDesc {
        TensorDesc::of(dims, dtype).unwrap()
    }

    fn counting(d: &TensorDesc, from: usize) -> HostTensor {
        let data = (0..d.tensor_type().volume()).map(|v| (from + v) as f32).collect();
        HostTensor::from_f32(d.tensor_type(), d.dtype, data).unwrap()
    }

    /// As `numpy.concatenate`, along the first, a middle and the last index.
    #[test]
    fn joins_end_to_end_as_numpy() {
        // a = [[0, 1, 2], [3, 4, 5]], b = [[100, 101, 102]] along s.
        let (a, b) = (desc(&[("s", 2), ("d", 3)], DType::F32), desc(&[("s", 1), ("d", 3)], DType::F32));
        let op = Concat::new(&[a.clone(), b.clone()], "s").unwrap();
        assert_eq!((op.outputs()[0].dims_string(), op.offsets()), ("s=3, d=3".to_string(), vec![0, 2]));
        let y = execute_whole(&op, &[counting(&a, 0), counting(&b, 100)]).unwrap();
        assert_eq!(y[0].to_f32(), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 100.0, 101.0, 102.0]);
        // Along d: a = [[0, 1], [2, 3]], b = [[10], [11]], c = [[20, 21], [22, 23]].
        let (a, b) = (desc(&[("s", 2), ("d", 2)], DType::F32), desc(&[("s", 2), ("d", 1)], DType::F32));
        let op = Concat::new(&[a.clone(), b.clone(), a.clone()], "d").unwrap();
        let y = execute_whole(&op, &[counting(&a, 0), counting(&b, 10), counting(&a, 20)]).unwrap();
        assert_eq!(y[0].to_f32(), [0.0, 1.0, 10.0, 20.0, 21.0, 2.0, 3.0, 11.0, 22.0, 23.0]);
    }

    /// An input whose indices are in another order is matched by name: b is [d, s], so its
    /// element (d, s) is 100 + 2d + s and lands at (s, 2 + d).
    #[test]
    fn inputs_are_matched_by_index_name() {
        let (a, b) = (desc(&[("s", 2), ("d", 2)], DType::F32), desc(&[("d", 3), ("s", 2)], DType::F32));
        let op = Concat::new(&[a.clone(), b.clone()], "d").unwrap();
        assert_eq!(op.outputs()[0].dims_string(), "s=2, d=5");
        let y = execute_whole(&op, &[counting(&a, 0), counting(&b, 100)]).unwrap();
        assert_eq!(y[0].to_f32(), [0.0, 1.0, 100.0, 102.0, 104.0, 2.0, 3.0, 101.0, 103.0, 105.0]);
    }

    /// Every spec on 1 to 4 devices gives the whole concatenation exactly, in f32 and bf16,
    /// the index in the middle and an input ordered differently.
    #[test]
    fn every_spec_equals_the_whole_concatenation() {
        for dtype in [DType::F32, DType::BF16] {
            let a = desc(&[("h", 2), ("s", 3), ("e", 4)], dtype);
            let b = desc(&[("h", 2), ("s", 5), ("e", 4)], dtype);
            let c = desc(&[("e", 4), ("s", 1), ("h", 2)], dtype);
            let op = Concat::new(&[a, b, c], "s").unwrap();
            assert_eq!(op.shardable().iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["h", "e"]);
            for p in 1..=4 {
                for (seed, choice) in enumerate_specs(&op, p).unwrap().iter().enumerate() {
                    let err = decomposition_error(&op, &choice.spec, seed as u64).unwrap();
                    assert_eq!(err, 0.0, "{dtype} counts {:?}", choice.counts);
                }
            }
        }
    }

    /// NaN and the infinities are copied as they are.
    #[test]
    fn nan_and_infinities_are_copied() {
        let x = desc(&[("i", 2)], DType::F32);
        let t = HostTensor::from_f32(x.tensor_type(), DType::F32, vec![f32::NAN, f32::NEG_INFINITY]).unwrap();
        let u = HostTensor::from_f32(x.tensor_type(), DType::F32, vec![f32::INFINITY, -0.0]).unwrap();
        let y = execute_whole(&Concat::new(&[x.clone(), x], "i").unwrap(), &[t, u]).unwrap()[0].to_f32();
        assert!(y[0].is_nan());
        assert_eq!(y[1..3], [f32::NEG_INFINITY, f32::INFINITY]);
        assert_eq!(y[3].to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn mismatched_inputs_are_refused_naming_the_index() {
        let index_of = |r: Result<Concat>| match r {
            Err(Error::Shape { op, index, reason }) => {
                assert_eq!(op, "concat");
                (index, reason)
            }
            other => panic!("expected a shape error, got {other:?}"),
        };
        let a = desc(&[("s", 2), ("d", 3)], DType::F32);
        let (index, reason) = index_of(Concat::new(&[a.clone(), desc(&[("t", 2), ("d", 3)], DType::F32)], "s"));
        assert!(index == "s" && reason.contains("input 1"), "{reason}");
        let (index, reason) = index_of(Concat::new(&[a.clone(), desc(&[("s", 2), ("d", 4)], DType::F32)], "s"));
        assert!(index == "d" && reason.contains("d=4"), "{reason}");
        let extra = desc(&[("s", 2), ("d", 3), ("h", 2)], DType::F32);
        assert_eq!(index_of(Concat::new(&[a.clone(), extra], "s")).0, "h");
        assert_eq!(index_of(Concat::new(&[a.clone(), a.clone()], "heads")).0, "heads");
        let invalid = |r: Result<Concat>| match r {
            Err(Error::Invalid { reason, .. }) => reason,
            other => panic!("expected an invalid-operator error, got {other:?}"),
        };
        assert!(invalid(Concat::new(std::slice::from_ref(&a), "s")).contains("two or more"));
        assert!(invalid(Concat::new(&[], "s")).contains("no input"));
        let e = invalid(Concat::new(&[a.clone(), desc(&[("s", 2), ("d", 3)], DType::BF16)], "s"));
        assert!(e.contains("bf16") && e.contains("f32"), "{e}");
        let ids = desc(&[("s", 2)], DType::I32);
        assert!(invalid(Concat::new(&[ids.clone(), ids], "s")).contains("i32"));
    }

    #[test]
    fn a_block_of_the_concatenated_index_is_a_kernel_error() {
        let a = desc(&[("s", 2), ("d", 3)], DType::F32);
        let op = Concat::new(&[a.clone(), a.clone()], "s").unwrap();
        let half = TensorType::new(&[0, 0], &[2, 3]).unwrap();
        let f = FunctionSpec { inputs: vec![half.clone(), half.clone()], outputs: vec![half.clone()] };
        let t = HostTensor::random(half, DType::F32, 1);
        let e = op.compute(&f, &[t.clone(), t]).unwrap_err().to_string();
        assert!(e.contains("whole `s`"), "{e}");
    }
}
