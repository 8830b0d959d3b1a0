//! Reductions: the sum, the maximum or the mean of a tensor over some of its named indices.
//!
//! Every index is shardable. Splitting a kept index splits the output; splitting a reduced
//! index makes partial outputs that the matching ⊕ (sum or max) combines. A mean's partial is
//! its block's sum divided by the *whole* count of reduced elements, so that the sum of the
//! partials is the mean.

use std::fmt;

use einsum_core::{Aggregation, HostTensor, Interval, KernelClass, TensorDesc, TensorType};
use einsum_joinagg::{AbstractOperator, DimIndex, Error, FunctionSpec, JoinAggSpec, Result, ShardableIndex, grid_spec};

use crate::common::{check_call, every_index, f32s, kernel_error};
use crate::einsum::permute;
use crate::vexp;

/// Which reduction a [`Reduce`] applies; it is also the ⊕ of its partial outputs.
///
/// Its names are the lowercase variants, derived: [`name`](Self::name), `VARIANTS`
/// ([`strum::VariantNames`]) and `FromStr` (an unknown name is the error that
/// [`parse`](Self::parse) returns; `parse` also trims the name first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::EnumString, strum::VariantNames)]
#[strum(serialize_all = "lowercase", parse_err_ty = Error, parse_err_fn = unknown_reduction)]
pub enum ReduceOp {
    /// The sum of the reduced elements.
    Sum,
    /// The largest of the reduced elements; NaN where any of them is NaN, as NumPy's `max`.
    Max,
    /// The sum of the reduced elements divided by their number (the product of the reduced
    /// indices' extents), as NumPy's `mean`: NaN where any is NaN or `+∞` and `−∞` meet.
    Mean,
}

impl ReduceOp {
    /// `sum`, `max` or `mean`; anything else is an error that lists the choices.
    pub fn parse(name: &str) -> Result<ReduceOp> {
        name.trim().parse()
    }

    /// The lowercase name (`sum`, `max`, `mean`).
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// The aggregation that combines partial reductions: a mean's partials (each its
    /// block's sum over the whole count) add up.
    pub fn aggregation(self) -> Aggregation {
        match self {
            ReduceOp::Sum | ReduceOp::Mean => Aggregation::Sum,
            ReduceOp::Max => Aggregation::Max,
        }
    }
}

/// The error of parsing an unknown reduction name: it lists the choices.
fn unknown_reduction(name: &str) -> Error {
    use strum::VariantNames;
    Error::Invalid {
        op: "reduce".into(),
        reason: format!("unknown reduction `{name}` (expected one of {})", ReduceOp::VARIANTS.join(", ")),
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The reduction of one tensor over some of its named indices (kind `reduce`). The output
/// keeps the other indices in their order; reducing over all of them gives a scalar.
#[derive(Clone, Debug)]
pub struct Reduce {
    op: ReduceOp,
    /// Positions of the reduced dims in the input, in input order.
    over: Vec<usize>,
    /// Positions of the kept dims in the input, in input order.
    keep: Vec<usize>,
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
    dims: DimIndex,
}

impl Reduce {
    /// Reduces `x` with `op` over the indices named in `over`. Fails, naming the index, on
    /// an unknown or repeated name, an index of extent 0, or an empty `over`.
    pub fn new(x: &TensorDesc, over: &[&str], op: ReduceOp) -> Result<Reduce> {
        let shape = |index: &str, reason: String| Error::Shape { op: "reduce".into(), index: index.into(), reason };
        if over.is_empty() {
            return Err(Error::Invalid {
                op: "reduce".into(),
                reason: format!("no index to reduce over in [{}]", x.dims_string()),
            });
        }
        let mut positions = Vec::with_capacity(over.len());
        for (i, name) in over.iter().enumerate() {
            let pos = x.index_of(name).map_err(|e| shape(name, e.to_string()))?;
            if over[..i].contains(name) {
                return Err(shape(name, "named twice in the indices to reduce over".into()));
            }
            positions.push(pos);
        }
        if let Some(d) = x.dims.iter().find(|d| d.extent == 0) {
            return Err(shape(&d.name, "has extent 0: empty tensors are not supported".into()));
        }
        positions.sort_unstable();
        let keep: Vec<usize> = (0..x.rank()).filter(|d| !positions.contains(d)).collect();
        let output = TensorDesc::new(keep.iter().map(|&d| x.dims[d].clone()).collect(), x.dtype)?;
        let dims = vec![(0..x.rank()).map(Some).collect(), keep.iter().map(|&d| Some(d)).collect()];
        Ok(Reduce { op, over: positions, keep, inputs: vec![x.clone()], outputs: vec![output], dims })
    }

    /// The reduction applied.
    pub fn op(&self) -> ReduceOp {
        self.op
    }

    /// The names of the reduced indices, in the input's order.
    pub fn over(&self) -> Vec<&str> {
        self.over.iter().map(|&d| self.inputs[0].dims[d].name.as_str()).collect()
    }

    /// The number of elements reduced into each output element of the whole tensor: the
    /// product of the reduced indices' extents, which a mean divides by in every block.
    pub fn count(&self) -> usize {
        self.over.iter().map(|&d| self.inputs[0].dims[d].extent).product()
    }
}

impl AbstractOperator for Reduce {
    fn kind(&self) -> &str {
        "reduce"
    }

    fn kernel_class(&self) -> KernelClass {
        KernelClass::Elementwise
    }

    fn inputs(&self) -> &[TensorDesc] {
        &self.inputs
    }

    fn outputs(&self) -> &[TensorDesc] {
        &self.outputs
    }

    fn aggregation(&self) -> Aggregation {
        self.op.aggregation()
    }

    fn shardable(&self) -> Vec<ShardableIndex> {
        every_index(&self.inputs[0])
    }

    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
        grid_spec("reduce", &self.inputs, &self.outputs, &self.shardable(), &self.dims, intervals)
    }

    /// One operation per input element that is combined into another: the block's input
    /// volume less its output volume.
    fn flops(&self, f: &FunctionSpec) -> f64 {
        let vol = |t: Option<&TensorType>| t.map_or(0, TensorType::volume);
        vol(f.inputs.first()).saturating_sub(vol(f.outputs.first())) as f64
    }

    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        check_call(self, f, inputs)?;
        let (x, block, out) = (&inputs[0], &f.inputs[0], &f.outputs[0]);
        let want = TensorType::from_intervals(self.keep.iter().map(|&d| block.dim(d)).collect());
        if *out != want {
            return Err(kernel_error(
                "reduce",
                format!("output block {out} does not match the input block, which gives {want}"),
            ));
        }
        let order: Vec<usize> = self.keep.iter().chain(&self.over).copied().collect();
        let data = permute(&f32s(x), &block.shape(), &order);
        let chunk: usize = self.over.iter().map(|&d| block.dim(d).len()).product();
        let count = self.count() as f64;
        let reduced: Vec<f32> = data
            .chunks_exact(chunk.max(1))
            .map(|c| match self.op {
                ReduceOp::Sum => c.iter().map(|&v| v as f64).sum::<f64>() as f32,
                ReduceOp::Max => vexp::max(c),
                ReduceOp::Mean => (c.iter().map(|&v| v as f64).sum::<f64>() / count) as f32,
            })
            .collect();
        Ok(vec![HostTensor::from_f32(want, self.outputs[0].dtype, reduced)?])
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::DType;
    use einsum_joinagg::{decomposition_error, enumerate_specs, execute_whole, request_spec};

    use super::*;

    fn x() -> TensorDesc {
        TensorDesc::of(&[("b", 2), ("t", 3), ("d", 4)], DType::F32).unwrap()
    }

    #[test]
    fn parse_and_aggregation() {
        assert_eq!(ReduceOp::parse("sum").unwrap(), ReduceOp::Sum);
        assert_eq!(ReduceOp::parse("max").unwrap().aggregation(), Aggregation::Max);
        let err = ReduceOp::parse("median").unwrap_err().to_string();
        assert!(err.contains("median") && err.contains("reduce") && err.contains("sum, max, mean"), "{err}");
        assert_eq!(ReduceOp::parse("mean").unwrap().aggregation(), Aggregation::Sum);
        assert_eq!(ReduceOp::Sum.to_string(), "sum");
        assert_eq!(ReduceOp::parse(" max\n").unwrap(), ReduceOp::Max);
        assert_eq!(<ReduceOp as strum::VariantNames>::VARIANTS, ["sum", "max", "mean"]);
    }

    #[test]
    fn output_drops_reduced_dims_and_values_are_right() {
        let r = Reduce::new(&x(), &["d", "b"], ReduceOp::Sum).unwrap();
        assert_eq!(r.kind(), "reduce");
        assert_eq!(r.over(), ["b", "d"]);
        assert_eq!(r.outputs()[0], TensorDesc::of(&[("t", 3)], DType::F32).unwrap());
        let ty = x().tensor_type();
        let data: Vec<f32> = (0..24).map(|v| v as f32).collect();
        let input = HostTensor::from_f32(ty, DType::F32, data).unwrap();
        // Sum over b and d of 12b + 4t + d: 2·4·4t + 4·12 + 2·6 = 32t + 60.
        assert_eq!(execute_whole(&r, std::slice::from_ref(&input)).unwrap()[0].to_f32(), vec![60.0, 92.0, 124.0]);
        let m = Reduce::new(&x(), &["t"], ReduceOp::Max).unwrap();
        let out = execute_whole(&m, &[input]).unwrap();
        assert_eq!(out[0].ty(), &TensorType::zero_bounded(&[2, 4]));
        assert_eq!(out[0].to_f32(), vec![8.0, 9.0, 10.0, 11.0, 20.0, 21.0, 22.0, 23.0]);
    }

    #[test]
    fn splitting_a_reduced_index_aggregates_partials() {
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Mean] {
            let r = Reduce::new(&x(), &["b", "t", "d"], op).unwrap();
            assert_eq!(r.outputs()[0].rank(), 0);
            assert_eq!(r.aggregation(), op.aggregation());
            let spec = request_spec(&r, &[2, 3, 2]).unwrap();
            assert_eq!(spec.len(), 12);
            assert_eq!(spec.output_multiplicities(0), vec![(TensorType::zero_bounded(&[]), 12)]);
            assert!(decomposition_error(&r, &spec, 5).unwrap() <= 1e-5);
            // Splitting only the kept index t: three disjoint output boxes.
            let r = Reduce::new(&x(), &["d"], op).unwrap();
            let spec = request_spec(&r, &[1, 3, 1]).unwrap();
            assert_eq!(spec.output_blocks(0).len(), 3);
            assert_eq!(r.flops(&spec.functions[0]), 8.0 - 2.0);
            assert!(decomposition_error(&r, &spec, 6).unwrap() <= 1e-5);
        }
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        let index_of = |r: Result<Reduce>| match r {
            Err(Error::Shape { op, index, reason }) => {
                assert_eq!(op, "reduce");
                (index, reason)
            }
            other => panic!("expected a shape error, got {other:?}"),
        };
        let (index, reason) = index_of(Reduce::new(&x(), &["heads"], ReduceOp::Sum));
        assert_eq!(index, "heads");
        assert!(reason.contains("t=3"), "{reason}");
        assert_eq!(index_of(Reduce::new(&x(), &["t", "t"], ReduceOp::Max)).0, "t");
        // Built literally: `TensorDesc::new` itself refuses extent 0.
        let z =
            TensorDesc { dims: vec![einsum_core::Dim::new("a", 0), einsum_core::Dim::new("b", 2)], dtype: DType::F32 };
        assert_eq!(index_of(Reduce::new(&z, &["b"], ReduceOp::Sum)).0, "a");
        assert!(matches!(Reduce::new(&x(), &[], ReduceOp::Sum), Err(Error::Invalid { .. })));
        let r = Reduce::new(&x(), &["t"], ReduceOp::Sum).unwrap();
        assert!(matches!(enumerate_specs(&r, 5), Err(Error::NoSpec { .. })));
        assert!(matches!(enumerate_specs(&r, 0), Err(Error::NoSpec { .. })));
    }

    #[test]
    fn kernel_rejects_inconsistent_blocks() {
        let r = Reduce::new(&x(), &["t"], ReduceOp::Sum).unwrap();
        let block = TensorType::new(&[0, 1, 0], &[2, 3, 4]).unwrap();
        let input = HostTensor::random(block.clone(), DType::F32, 1);
        let bad_out = TensorType::new(&[0, 0], &[1, 4]).unwrap();
        let f = FunctionSpec { inputs: vec![block.clone()], outputs: vec![bad_out] };
        assert!(matches!(r.compute(&f, std::slice::from_ref(&input)), Err(Error::Kernel { .. })));
        let f = FunctionSpec { inputs: vec![x().tensor_type()], outputs: vec![TensorType::zero_bounded(&[2, 4])] };
        assert!(matches!(r.compute(&f, std::slice::from_ref(&input)), Err(Error::Kernel { .. })));
        let f = FunctionSpec { inputs: vec![block], outputs: vec![TensorType::zero_bounded(&[2, 4])] };
        assert!(r.compute(&f, std::slice::from_ref(&input)).is_ok());
        assert!(matches!(r.compute(&f, &[]), Err(Error::Kernel { .. })));
    }

    /// The mean against a hand sum: over b and d of 12b + 4t + d, (32t + 60) / 8; over t
    /// alone, the middle row 12b + 4 + d.
    #[test]
    fn mean_divides_the_sum_by_the_count() {
        let data: Vec<f32> = (0..24).map(|v| v as f32).collect();
        let input = HostTensor::from_f32(x().tensor_type(), DType::F32, data).unwrap();
        let r = Reduce::new(&x(), &["d", "b"], ReduceOp::Mean).unwrap();
        assert_eq!(r.count(), 8);
        let y = execute_whole(&r, std::slice::from_ref(&input)).unwrap();
        assert_eq!(y[0].to_f32(), vec![7.5, 11.5, 15.5]);
        let r = Reduce::new(&x(), &["t"], ReduceOp::Mean).unwrap();
        let y = execute_whole(&r, &[input]).unwrap();
        assert_eq!(y[0].to_f32(), vec![4.0, 5.0, 6.0, 7.0, 16.0, 17.0, 18.0, 19.0]);
    }

    /// Every spec on 1 to 4 devices, splitting reduced and kept indices alike, gives the
    /// whole mean: each partial is its block's sum over the whole count. In bf16 within its
    /// precision (partials are rounded before they are summed).
    #[test]
    fn every_mean_spec_sums_partials_to_the_whole_mean() {
        for dtype in [DType::F32, DType::BF16] {
            let x = TensorDesc::of(&[("b", 2), ("t", 6), ("d", 4)], dtype).unwrap();
            let tol = if dtype == DType::F32 { 1e-6 } else { 4.0 * DType::BF16.epsilon() };
            for over in [&["t"][..], &["b", "d"], &["b", "t", "d"]] {
                let r = Reduce::new(&x, over, ReduceOp::Mean).unwrap();
                for p in 1..=4 {
                    for (seed, choice) in enumerate_specs(&r, p).unwrap().iter().enumerate() {
                        let err = decomposition_error(&r, &choice.spec, seed as u64).unwrap();
                        assert!(err <= tol, "{dtype} over {over:?} counts {:?}: {err}", choice.counts);
                    }
                }
            }
        }
    }

    /// As NumPy's mean: a NaN makes its row NaN, +∞ and −∞ together make NaN, one infinity
    /// stays.
    #[test]
    fn mean_of_nan_and_infinities_is_numpys() {
        let (nan, inf) = (f32::NAN, f32::INFINITY);
        let x = TensorDesc::of(&[("r", 4), ("k", 2)], DType::F32).unwrap();
        let t =
            HostTensor::from_f32(x.tensor_type(), DType::F32, vec![1.0, nan, inf, -inf, inf, 1.0, 2.0, 4.0]).unwrap();
        let y = execute_whole(&Reduce::new(&x, &["k"], ReduceOp::Mean).unwrap(), &[t]).unwrap()[0].to_f32();
        assert!(y[0].is_nan() && y[1].is_nan(), "{y:?}");
        assert_eq!(y[2..], [inf, 3.0]);
    }
}
