//! Elementwise binary operators with broadcasting over named indices.
//!
//! `y[a's indices, then b's other indices] = op(a[a's indices], b[b's indices])`. Indices
//! are matched by name, not by position, so `[tokens, d] + [d]` adds a bias row to every
//! token. [`Binary::new`] broadcasts only an operand whose indices the other has, so a
//! misspelt index name is an error rather than a silent outer product; [`Binary::outer`]
//! asks for the outer broadcast (`[i] * [j]` → `[i, j]`). Every output index is shardable anywhere;
//! each input's block follows the indices it has, so an input that lacks an index is
//! replicated to every interval of that index.

use einsum_core::{HostTensor, Interval, KernelClass, TensorDesc, TensorType};
use einsum_joinagg::{AbstractOperator, DimIndex, Error, FunctionSpec, JoinAggSpec, Result, ShardableIndex, grid_spec};

use crate::{
    common::{check_call, every_index, f32s, kernel_error},
    parallel, vexp,
};

const KIND: &str = "binary";

/// The error of parsing an unknown binary operation name: it lists the valid names.
fn unknown_binary_op(name: &str) -> Error {
    use strum::VariantNames;
    Error::Invalid {
        op: KIND.into(),
        reason: format!("unknown binary operation `{name}` (expected one of {})", BinaryOp::VARIANTS.join(", ")),
    }
}

/// An elementwise function of two scalars.
///
/// Its names are the lowercase variants, derived: [`name`](Self::name), `VARIANTS`
/// ([`strum::VariantNames`], the names [`parse`](Self::parse) accepts, in declaration
/// order) and `FromStr` (an unknown name is the [`Error::Invalid`] that `parse` returns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::EnumString, strum::VariantNames)]
#[strum(serialize_all = "lowercase", parse_err_ty = Error, parse_err_fn = unknown_binary_op)]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a − b`.
    Sub,
    /// `a · b`.
    Mul,
    /// `a / b`.
    Div,
    /// `max(a, b)`, as NumPy's `maximum`: NaN where either operand is NaN.
    Max,
}

impl BinaryOp {
    /// The operation named `name` (`add`, `sub`, `mul`, `div` or `max`); an unknown name
    /// is an [`Error::Invalid`] that lists the valid names.
    pub fn parse(name: &str) -> Result<BinaryOp> {
        name.parse()
    }

    /// The lowercase name, as [`parse`](Self::parse) accepts it.
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// Applies the operation to two scalars, with IEEE semantics as NumPy applies them: a
    /// NaN operand gives NaN (`max` included: `max(NaN, 1)` is NaN, where `f32::max` would
    /// give 1), `inf - inf`, `0 · inf` and `0 / 0` are NaN, `x / 0` is a signed infinity;
    /// `max(-0, +0)` is its first operand.
    pub fn apply(self, a: f32, b: f32) -> f32 {
        match self {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::Max => vexp::maximum(a, b),
        }
    }
}

/// An elementwise binary operator with broadcasting over named indices: the output has
/// `a`'s indices in order, then those of `b` that `a` lacks, and `a`'s dtype.
#[derive(Clone, Debug)]
pub struct Binary {
    op: BinaryOp,
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
    /// For each dimension of `b`, its position in the output.
    b_pos: Vec<usize>,
}

impl Binary {
    /// `y = op(a, b)`, where one input's indices include all of the other's, which is
    /// broadcast over the indices it lacks (`[tokens, d] + [d]`). Inputs that each have an
    /// index the other lacks are an [`Error::Shape`] naming both inputs and those indices
    /// (a misspelt `d_modle` would otherwise broadcast to an extra dimension); ask for
    /// that with [`Binary::outer`]. An index both inputs name must have one extent (else
    /// [`Error::Shape`] naming it, with both extents); the inputs must share a dtype.
    pub fn new(a: &TensorDesc, b: &TensorDesc, op: BinaryOp) -> Result<Binary> {
        let only = |x: &TensorDesc, y: &TensorDesc| -> Vec<String> {
            x.dims.iter().filter(|d| y.position(&d.name).is_none()).map(|d| d.name.clone()).collect()
        };
        let (only_a, only_b) = (only(a, b), only(b, a));
        if !only_a.is_empty() && !only_b.is_empty() {
            return Err(Error::Shape {
                op: KIND.into(),
                index: only_b[0].clone(),
                reason: format!(
                    "a [{}] and b [{}] each have indices the other lacks (a: {}; b: {}); an input is \
                     broadcast only over indices the other has, so rename the indices to match, \
                     or ask for an outer broadcast (Binary::outer)",
                    a.dims_string(),
                    b.dims_string(),
                    only_a.join(", "),
                    only_b.join(", ")
                ),
            });
        }
        Self::outer(a, b, op)
    }

    /// `y = op(a, b)`, broadcasting each input over the indices it lacks: the outer
    /// broadcast, `[i] * [j]` → `[i, j]`. An index both inputs name must have one extent
    /// (else [`Error::Shape`] naming it, with both extents); the inputs must share a dtype.
    pub fn outer(a: &TensorDesc, b: &TensorDesc, op: BinaryOp) -> Result<Binary> {
        if a.dtype != b.dtype {
            return Err(Error::Invalid {
                op: KIND.into(),
                reason: format!("inputs have different dtypes: a is {}, b is {}", a.dtype, b.dtype),
            });
        }
        let mut dims = a.dims.clone();
        let mut b_pos = Vec::with_capacity(b.rank());
        for d in &b.dims {
            match a.position(&d.name) {
                Some(i) if a.dims[i].extent != d.extent => {
                    return Err(Error::Shape {
                        op: KIND.into(),
                        index: d.name.clone(),
                        reason: format!(
                            "extent {} in a [{}] but {} in b [{}]",
                            a.dims[i].extent,
                            a.dims_string(),
                            d.extent,
                            b.dims_string()
                        ),
                    });
                }
                Some(i) => b_pos.push(i),
                None => {
                    b_pos.push(dims.len());
                    dims.push(d.clone());
                }
            }
        }
        let y = TensorDesc::new(dims, a.dtype)?;
        Ok(Binary { op, inputs: vec![a.clone(), b.clone()], outputs: vec![y], b_pos })
    }

    /// The elementwise operation.
    pub fn op(&self) -> BinaryOp {
        self.op
    }

    fn dim_index(&self) -> DimIndex {
        vec![
            (0..self.inputs[0].rank()).map(Some).collect(),
            self.b_pos.iter().copied().map(Some).collect(),
            (0..self.outputs[0].rank()).map(Some).collect(),
        ]
    }

    /// Checks that the input blocks are the projections of the output block onto each
    /// input's indices.
    fn check_blocks(&self, f: &FunctionSpec) -> Result<()> {
        let y = &f.outputs[0];
        let a_pos: Vec<usize> = (0..self.inputs[0].rank()).collect();
        for (k, pos) in [(0, &a_pos), (1, &self.b_pos)] {
            let block = &f.inputs[k];
            if pos.iter().enumerate().any(|(d, &o)| block.dim(d) != y.dim(o)) {
                return Err(kernel_error(
                    KIND,
                    format!("input {k} block {block} does not follow the output block {y} along its indices"),
                ));
            }
        }
        Ok(())
    }
}

impl AbstractOperator for Binary {
    fn kind(&self) -> &str {
        KIND
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

    fn shardable(&self) -> Vec<ShardableIndex> {
        every_index(&self.outputs[0])
    }

    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
        grid_spec(KIND, &self.inputs, &self.outputs, &self.shardable(), &self.dim_index(), intervals)
    }

    fn flops(&self, f: &FunctionSpec) -> f64 {
        f.outputs.first().map_or(0.0, |t| t.volume() as f64)
    }

    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        check_call(self, f, inputs)?;
        self.check_blocks(f)?;
        let y = &f.outputs[0];
        let (a, b) = (f32s(&inputs[0]), f32s(&inputs[1]));
        // Strides of each input's block along every output dimension (0 where broadcast).
        let rank = y.rank();
        let mut sa = vec![0; rank];
        for (d, s) in f.inputs[0].strides().into_iter().enumerate() {
            sa[d] = s;
        }
        let mut sb = vec![0; rank];
        for (&o, s) in self.b_pos.iter().zip(f.inputs[1].strides()) {
            sb[o] = s;
        }
        let same = |t: &TensorType| t == y;
        if rank > 0 && same(&f.inputs[0]) && same(&f.inputs[1]) && self.b_pos.iter().enumerate().all(|(d, &p)| d == p) {
            // No broadcast: one flat loop the compiler vectorizes, spread over the kernel's
            // helper threads.
            const CHUNK: usize = 1 << 15;
            let mut out = vec![0.0f32; y.volume()];
            let op = self.op;
            parallel::for_chunks_mut(&mut out, CHUNK, |i, o| {
                let (a, b) = (&a[i * CHUNK..][..o.len()], &b[i * CHUNK..][..o.len()]);
                o.iter_mut().zip(a.iter().zip(b.iter())).for_each(|(o, (&x, &z))| *o = op.apply(x, z));
            });
            return Ok(vec![HostTensor::from_f32(y.clone(), self.outputs[0].dtype, out)?]);
        }
        let mut out = Vec::with_capacity(y.volume());
        if rank == 0 {
            out.push(self.op.apply(a[0], b[0]));
        } else if y.volume() > 0 {
            let shape = y.shape();
            let (run, ra, rb) = (shape[rank - 1], sa[rank - 1], sb[rank - 1]);
            // Odometer over every dimension but the last, tracking both input offsets.
            let mut idx = vec![0; rank - 1];
            let (mut oa, mut ob) = (0, 0);
            'rows: loop {
                out.extend((0..run).map(|i| self.op.apply(a[oa + i * ra], b[ob + i * rb])));
                let mut d = rank - 1;
                loop {
                    if d == 0 {
                        break 'rows;
                    }
                    d -= 1;
                    idx[d] += 1;
                    oa += sa[d];
                    ob += sb[d];
                    if idx[d] < shape[d] {
                        break;
                    }
                    oa -= shape[d] * sa[d];
                    ob -= shape[d] * sb[d];
                    idx[d] = 0;
                }
            }
        }
        Ok(vec![HostTensor::from_f32(y.clone(), self.outputs[0].dtype, out)?])
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::{DType, TensorType, relative_error};
    use einsum_joinagg::{decomposition_error, enumerate_specs, execute_whole};

    use super::*;

    fn tensor(desc: &TensorDesc, data: Vec<f32>) -> HostTensor {
        HostTensor::from_f32(desc.tensor_type(), desc.dtype, data).unwrap()
    }

    #[test]
    fn ops_apply_and_parse() {
        assert_eq!(BinaryOp::Add.apply(2.0, 3.0), 5.0);
        assert_eq!(BinaryOp::Sub.apply(2.0, 3.0), -1.0);
        assert_eq!(BinaryOp::Mul.apply(2.0, 3.0), 6.0);
        assert_eq!(BinaryOp::Div.apply(3.0, 2.0), 1.5);
        assert_eq!(BinaryOp::Max.apply(-2.0, 3.0), 3.0);
        for name in <BinaryOp as strum::VariantNames>::VARIANTS {
            assert_eq!(BinaryOp::parse(name).unwrap().name(), *name);
        }
        let msg = BinaryOp::parse("pow").unwrap_err().to_string();
        assert!(msg.contains("pow") && msg.contains("add") && msg.contains("max"), "{msg}");
    }

    #[test]
    fn bias_row_broadcasts_over_tokens() {
        let x = TensorDesc::of(&[("tokens", 3), ("d", 2)], DType::F32).unwrap();
        let bias = TensorDesc::of(&[("d", 2)], DType::F32).unwrap();
        let op = Binary::new(&x, &bias, BinaryOp::Add).unwrap();
        assert_eq!(op.kind(), "binary");
        assert_eq!(op.op(), BinaryOp::Add);
        assert_eq!(op.outputs()[0], x);
        let y = execute_whole(&op, &[tensor(&x, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), tensor(&bias, vec![10.0, 20.0])])
            .unwrap();
        assert_eq!(y[0].to_f32(), vec![11.0, 22.0, 13.0, 24.0, 15.0, 26.0]);
        // The bias is replicated to every token block, and split with d.
        let spec = op.join_agg_spec(&[Interval::split_even(3, 3).unwrap(), Interval::split_even(2, 2).unwrap()]);
        let spec = spec.unwrap();
        assert_eq!(spec.len(), 6);
        assert_eq!(spec.functions[4].inputs[1], TensorType::new(&[0], &[1]).unwrap());
        assert_eq!(spec.functions[5].inputs[1], TensorType::new(&[1], &[2]).unwrap());
    }

    /// Same-shape operands take the flat path, split over helper threads when lent: every
    /// element is still `op(a, b)`, and a transposed operand still takes the strided path.
    #[test]
    fn same_shape_operands_are_elementwise_on_any_number_of_threads() {
        let (rows, cols) = (301, 131);
        let a = TensorDesc::of(&[("i", rows), ("j", cols)], DType::F32).unwrap();
        let bt = TensorDesc::of(&[("j", cols), ("i", rows)], DType::F32).unwrap();
        let ta = HostTensor::random(a.tensor_type(), DType::F32, 3);
        let tb = HostTensor::random(a.tensor_type(), DType::F32, 4);
        let op = Binary::new(&a, &a, BinaryOp::Sub).unwrap();
        let want: Vec<f32> = ta.to_f32().iter().zip(tb.to_f32()).map(|(x, z)| x - z).collect();
        for helpers in [0, 1, 3] {
            let args = [ta.clone(), tb.clone()];
            let y = einsum_core::intra_op::with_helpers(helpers, || execute_whole(&op, &args)).unwrap();
            assert_eq!(y[0].to_f32(), want, "{helpers} helpers");
        }
        let transposed = Binary::new(&a, &bt, BinaryOp::Sub).unwrap();
        let tbt = HostTensor::random(bt.tensor_type(), DType::F32, 5);
        let y = execute_whole(&transposed, &[ta.clone(), tbt.clone()]).unwrap();
        for (i, j) in [(0, 0), (rows - 1, 3), (7, cols - 1)] {
            let got = y[0].get(&[i, j]).unwrap();
            assert_eq!(got, ta.get(&[i, j]).unwrap() - tbt.get(&[j, i]).unwrap());
        }
    }

    #[test]
    fn outer_product_of_disjoint_indices() {
        let a = TensorDesc::of(&[("a", 2)], DType::F32).unwrap();
        let b = TensorDesc::of(&[("b", 3)], DType::F32).unwrap();
        assert!(Binary::new(&a, &b, BinaryOp::Mul).is_err(), "an outer broadcast is asked for");
        let op = Binary::outer(&a, &b, BinaryOp::Mul).unwrap();
        assert_eq!(op.outputs()[0].shape(), vec![2, 3]);
        let y = execute_whole(&op, &[tensor(&a, vec![1.0, 2.0]), tensor(&b, vec![3.0, 4.0, 5.0])]).unwrap();
        assert_eq!(y[0].to_f32(), vec![3.0, 4.0, 5.0, 6.0, 8.0, 10.0]);
    }

    #[test]
    fn indices_match_by_name_not_position() {
        let a = TensorDesc::of(&[("i", 2), ("j", 3)], DType::F32).unwrap();
        let b = TensorDesc::of(&[("k", 2), ("j", 3), ("i", 2)], DType::F32).unwrap();
        let op = Binary::new(&a, &b, BinaryOp::Sub).unwrap();
        let y = &op.outputs()[0];
        assert_eq!(y.dims.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), vec!["i", "j", "k"]);
        let (ta, tb) =
            (HostTensor::random(a.tensor_type(), DType::F32, 1), HostTensor::random(b.tensor_type(), DType::F32, 2));
        let out = execute_whole(&op, &[ta.clone(), tb.clone()]).unwrap();
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..2 {
                    let want = ta.get(&[i, j]).unwrap() - tb.get(&[k, j, i]).unwrap();
                    assert_eq!(out[0].get(&[i, j, k]), Some(want));
                }
            }
        }
        for p in [2, 4, 6, 12] {
            for choice in enumerate_specs(&op, p).unwrap() {
                assert_eq!(decomposition_error(&op, &choice.spec, 4).unwrap(), 0.0);
            }
        }
    }

    #[test]
    fn a_scalar_broadcasts_everywhere() {
        let s = TensorDesc::of(&[], DType::F32).unwrap();
        let v = TensorDesc::of(&[("n", 3)], DType::F32).unwrap();
        let op = Binary::new(&s, &v, BinaryOp::Div).unwrap();
        assert_eq!(op.outputs()[0], v);
        let y = execute_whole(&op, &[tensor(&s, vec![6.0]), tensor(&v, vec![1.0, 2.0, 3.0])]).unwrap();
        assert_eq!(y[0].to_f32(), vec![6.0, 3.0, 2.0]);
        let spec = enumerate_specs(&op, 3).unwrap().remove(0).spec;
        assert!(spec.functions.iter().all(|f| f.inputs[0] == s.tensor_type()));
        assert_eq!(decomposition_error(&op, &spec, 1).unwrap(), 0.0);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let a = TensorDesc::of(&[("t", 4), ("d", 8)], DType::F32).unwrap();
        let b = TensorDesc::of(&[("d", 6)], DType::F32).unwrap();
        let err = Binary::new(&a, &b, BinaryOp::Add).unwrap_err();
        assert!(matches!(&err, Error::Shape { index, .. } if index == "d"), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("binary") && msg.contains('8') && msg.contains('6'), "{msg}");
        let c = TensorDesc::of(&[("d", 8)], DType::BF16).unwrap();
        assert!(matches!(Binary::new(&a, &c, BinaryOp::Add), Err(Error::Invalid { .. })));
        let s = TensorDesc::of(&[], DType::F32).unwrap();
        let op = Binary::new(&s, &s, BinaryOp::Max).unwrap();
        assert!(matches!(enumerate_specs(&op, 2), Err(Error::NoSpec { .. })));
        assert_eq!(enumerate_specs(&op, 1).unwrap().len(), 1);
    }

    #[test]
    fn misaligned_blocks_are_kernel_errors() {
        let a = TensorDesc::of(&[("t", 4), ("d", 2)], DType::F32).unwrap();
        let b = TensorDesc::of(&[("d", 2)], DType::F32).unwrap();
        let op = Binary::new(&a, &b, BinaryOp::Add).unwrap();
        let ya = TensorType::new(&[0, 0], &[2, 2]).unwrap();
        let bb = TensorType::new(&[1], &[2]).unwrap();
        let f = FunctionSpec { inputs: vec![ya.clone(), bb.clone()], outputs: vec![ya.clone()] };
        let ins = [HostTensor::random(ya, DType::F32, 1), HostTensor::random(bb, DType::F32, 2)];
        assert!(matches!(op.compute(&f, &ins), Err(Error::Kernel { .. })));
    }

    #[test]
    fn f16_storage_stays_within_its_precision() {
        let a = TensorDesc::of(&[("t", 6), ("d", 8)], DType::F16).unwrap();
        let b = TensorDesc::of(&[("d", 8)], DType::F16).unwrap();
        let op = Binary::new(&a, &b, BinaryOp::Mul).unwrap();
        for choice in enumerate_specs(&op, 4).unwrap() {
            assert!(decomposition_error(&op, &choice.spec, 8).unwrap() <= 2.0 * DType::F16.epsilon());
        }
        let ins =
            [HostTensor::random(a.tensor_type(), DType::F16, 1), HostTensor::random(b.tensor_type(), DType::F16, 2)];
        let y = execute_whole(&op, &ins).unwrap();
        assert_eq!(y[0].dtype(), DType::F16);
        let (a32, b32) = (TensorDesc { dtype: DType::F32, ..a }, TensorDesc { dtype: DType::F32, ..b });
        let op32 = Binary::new(&a32, &b32, BinaryOp::Mul).unwrap();
        let y32 = execute_whole(&op32, &[ins[0].cast(DType::F32), ins[1].cast(DType::F32)]).unwrap();
        assert!(relative_error(&y[0], &y32[0]) <= DType::F16.epsilon());
    }
}
