//! Fused elementwise chains for the CPU backend: a chain of [`Unary`] and aligned [`Binary`]
//! kernels over one block, whose intermediates have a single reader, run as one pass over
//! the data ([`ElementwiseChain`]), with no intermediate buffer.
//!
//! # Design
//! The fusion pass is the backend-independent one of `einsum-core`
//! ([`einsum_core::taskgraph::fuse`]); [`RULES`] is the CPU backend's pattern for it. A rule
//! sees two kernels' descriptions ([`Pair`]): each is a unary, an aligned binary (operands
//! and result laid out alike, every block the same box: SwiGLU's `silu(g)·u`, a residual
//! add) or a chain fused earlier, and the rule composes their programs into one. The CPU
//! backend runs the pass until nothing changes, so a chain of any length becomes one task.
//!
//! # Numerics
//! Every step computes what its unfused kernel computes ([`UnaryOp::apply`], SiLU through
//! the same vectorized loop, [`BinaryOp::apply`]) and rounds its result to the storage
//! dtype, as the unfused kernel's output buffer did; so a fused chain's result equals the
//! unfused kernels' bit for bit in every dtype, and the CPU backend still equals the
//! reference interpreter.

use std::ops::Range;

use einsum_core::taskgraph::fuse::{FusedOp, FusedOperator, Pair, Rule};
use einsum_core::{DType, Elements, HostTensor, KernelInfo, TensorType};
use einsum_joinagg::AbstractOperator;
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use crate::binary::{Binary, BinaryOp};
use crate::parallel;
use crate::unary::{Unary, UnaryOp};
use crate::vexp;

/// The CPU backend's fusion patterns: elementwise chains.
pub const RULES: [Rule; 1] = [Rule { kind: "elementwise", keeps_intermediate: false, fuse: chain }];

/// Where a step reads an operand: a fused kernel input, or an earlier step's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    /// Input block `i` of the fused kernel.
    Input(usize),
    /// The result of step `s`.
    Step(usize),
}

/// One elementwise operation of a chain.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Step {
    /// `op(x)`.
    Unary(UnaryOp, Operand),
    /// `op(a, b)`.
    Binary(BinaryOp, Operand, Operand),
}

/// Elementwise steps over blocks of one box, the last step's result being the output: one
/// pass over the data, computing every step on a cache-sized piece before the next piece.
#[derive(Clone, Debug, PartialEq)]
pub struct ElementwiseChain {
    inputs: usize,
    steps: Vec<Step>,
    dtype: DType,
}

impl ElementwiseChain {
    /// `op(x)` on input 0.
    pub fn unary(op: UnaryOp, dtype: DType) -> Self {
        ElementwiseChain { inputs: 1, steps: vec![Step::Unary(op, Operand::Input(0))], dtype }
    }

    /// `op(a, b)` on inputs 0 and 1.
    pub fn binary(op: BinaryOp, dtype: DType) -> Self {
        ElementwiseChain { inputs: 2, steps: vec![Step::Binary(op, Operand::Input(0), Operand::Input(1))], dtype }
    }

    /// The chain of `steps` over `inputs` input blocks, in `dtype`: `None` unless there is a
    /// step and every operand is an input below `inputs` or an earlier step.
    pub fn new(inputs: usize, steps: Vec<Step>, dtype: DType) -> Option<Self> {
        let valid = |o: Operand, i: usize| match o {
            Operand::Input(k) => k < inputs,
            Operand::Step(s) => s < i,
        };
        let ok = steps.iter().enumerate().all(|(i, s)| match *s {
            Step::Unary(_, x) => valid(x, i),
            Step::Binary(_, a, b) => valid(a, i) && valid(b, i),
        });
        (ok && !steps.is_empty()).then_some(ElementwiseChain { inputs, steps, dtype })
    }

    /// The number of input blocks.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// The steps, in order (every operand an input or an earlier step).
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// `second` reading this chain's result as its input `operand`: the inputs are this
    /// chain's, then `second`'s others (the fusion pass's order). `None` when `operand` is
    /// not an input of `second` or the dtypes differ.
    pub fn then(&self, second: &ElementwiseChain, operand: usize) -> Option<ElementwiseChain> {
        if operand >= second.inputs || self.dtype != second.dtype {
            return None;
        }
        let (n, offset) = (self.inputs, self.steps.len());
        let result = Operand::Step(offset - 1);
        let map = |o: Operand| match o {
            Operand::Input(j) if j == operand => result,
            Operand::Input(j) if j < operand => Operand::Input(n + j),
            Operand::Input(j) => Operand::Input(n + j - 1),
            Operand::Step(s) => Operand::Step(offset + s),
        };
        let mut steps = self.steps.clone();
        steps.extend(second.steps.iter().map(|s| match *s {
            Step::Unary(op, x) => Step::Unary(op, map(x)),
            Step::Binary(op, a, b) => Step::Binary(op, map(a), map(b)),
        }));
        Some(ElementwiseChain { inputs: n + second.inputs - 1, steps, dtype: self.dtype })
    }

    /// Runs the chain on `inputs` (blocks of one box, in the chain's dtype), producing one
    /// block of type `out` and the chain's dtype. Spread over the kernel's helper threads by
    /// chunks; every element is computed by the same operations whatever the split.
    pub fn compute(&self, inputs: &[HostTensor], out: &TensorType) -> Result<HostTensor, String> {
        if inputs.len() != self.inputs {
            return Err(format!("an elementwise chain of {} inputs got {}", self.inputs, inputs.len()));
        }
        if let Some(t) = inputs.iter().find(|t| t.ty() != out || t.dtype() != self.dtype) {
            return Err(format!(
                "input block {} {} differs from the output block {out} {}: a fused chain needs one box",
                t.ty(),
                t.dtype(),
                self.dtype
            ));
        }
        // A strided view (a stitch of views) is compacted once; contiguous inputs are read in place.
        let compacted: Vec<Option<HostTensor>> =
            inputs.iter().map(|t| (!t.is_contiguous()).then(|| t.compact())).collect();
        let sources: Vec<Elements<'_>> = inputs
            .iter()
            .zip(&compacted)
            .map(|(t, c)| c.as_ref().unwrap_or(t).elements().expect("a compact tensor is contiguous"))
            .collect();
        let mut data = vec![0.0f32; out.volume()];
        // Chunks for the helper threads, each computed piece by piece.
        const CHUNK: usize = 1 << 15;
        parallel::for_chunks_mut(&mut data, CHUNK, |i, chunk| {
            let mut scratch = Scratch::new(self.inputs, self.steps.len());
            for (j, piece) in chunk.chunks_mut(PIECE).enumerate() {
                self.piece(&sources, i * CHUNK + j * PIECE, piece, &mut scratch);
            }
        });
        HostTensor::from_f32(out.clone(), self.dtype, data).map_err(|e| e.to_string())
    }

    /// Computes elements `start..start + out.len()` of the result into `out`.
    fn piece(&self, sources: &[Elements<'_>], start: usize, out: &mut [f32], scratch: &mut Scratch) {
        let len = out.len();
        let range = start..start + len;
        let Scratch { inputs: converted, steps: results } = scratch;
        // Inputs in half precision are converted into the scratch; f32 ones are read in place.
        for (k, src) in sources.iter().enumerate() {
            let dst = &mut converted[k * PIECE..][..len];
            match *src {
                Elements::F32(_) => {}
                Elements::F16(v) => v[range.clone()].convert_to_f32_slice(dst),
                Elements::BF16(v) => v[range.clone()].convert_to_f32_slice(dst),
                Elements::I32(v) => dst.iter_mut().zip(&v[range.clone()]).for_each(|(d, &x)| *d = x as f32),
            }
        }
        let converted: &[f32] = converted;
        let last = self.steps.len() - 1;
        for (i, step) in self.steps.iter().enumerate() {
            let (done, rest) = results.split_at_mut(i * PIECE);
            let done: &[f32] = done;
            let read = |o: Operand| operand(o, sources, converted, done, range.clone());
            let dst: &mut [f32] = if i == last { &mut *out } else { &mut rest[..len] };
            match *step {
                Step::Unary(UnaryOp::Silu, x) => {
                    dst.copy_from_slice(read(x));
                    vexp::silu_in_place(dst);
                }
                Step::Unary(op, x) => dst.iter_mut().zip(read(x)).for_each(|(d, &x)| *d = op.apply(x)),
                Step::Binary(op, a, b) => {
                    dst.iter_mut().zip(read(a).iter().zip(read(b))).for_each(|(d, (&a, &b))| *d = op.apply(a, b))
                }
            }
            // The unfused kernel stored its result in the storage dtype.
            round_to(self.dtype, dst);
        }
    }
}

/// The elements `range` of operand `o`: an f32 input in place, a converted input, or an
/// earlier step's result (`done` holds steps' pieces of [`PIECE`] elements each).
fn operand<'a>(
    o: Operand,
    sources: &[Elements<'a>],
    converted: &'a [f32],
    done: &'a [f32],
    range: Range<usize>,
) -> &'a [f32] {
    let len = range.len();
    match o {
        Operand::Input(k) => match sources[k] {
            Elements::F32(v) => &v[range],
            _ => &converted[k * PIECE..][..len],
        },
        Operand::Step(j) => &done[j * PIECE..][..len],
    }
}

/// Elements computed at once per step: small enough that every step's piece stays in the
/// L1 cache while the next step reads it.
const PIECE: usize = 1024;

/// One thread's pieces: converted inputs and step results.
struct Scratch {
    inputs: Vec<f32>,
    steps: Vec<f32>,
}

impl Scratch {
    fn new(inputs: usize, steps: usize) -> Self {
        Scratch { inputs: vec![0.0; inputs * PIECE], steps: vec![0.0; steps * PIECE] }
    }
}

/// Rounds every value to `dtype` (and back to f32), as storing it in a block of that dtype
/// would.
fn round_to(dtype: DType, xs: &mut [f32]) {
    // Through a small buffer with `half`'s slice conversions (F16C where present), which
    // round as `f16::from_f32` does.
    fn via<T: Copy + Default>(xs: &mut [f32], to: fn(&[f32], &mut [T]), from: fn(&[T], &mut [f32])) {
        let mut buf = [T::default(); PIECE];
        for c in xs.chunks_mut(PIECE) {
            let b = &mut buf[..c.len()];
            to(c, b);
            from(b, c);
        }
    }
    match dtype {
        DType::F32 => {}
        DType::F16 => via::<f16>(xs, |x, b| b.convert_from_f32_slice(x), |b, x| b.convert_to_f32_slice(x)),
        DType::BF16 => via::<bf16>(xs, |x, b| b.convert_from_f32_slice(x), |b, x| b.convert_to_f32_slice(x)),
        DType::I32 => xs.iter_mut().for_each(|x| *x = *x as i32 as f32),
    }
}

impl FusedOp for ElementwiseChain {
    /// One pass: the chain's one output block.
    fn run(&self, inputs: &[HostTensor], outputs: &[(TensorType, DType)]) -> Option<Result<Vec<HostTensor>, String>> {
        Some(match outputs {
            [(ty, dtype)] if *dtype == self.dtype => self.compute(inputs, ty).map(|t| vec![t]),
            _ => Err(format!("an elementwise chain writes one {} block, asked for {outputs:?}", self.dtype)),
        })
    }
}

/// The index names of a descriptor, in order.
fn names(d: &einsum_core::TensorDesc) -> Vec<&str> {
    d.dims.iter().map(|d| d.name.as_str()).collect()
}

/// Kernel `info` as a chain over one box: a unary, a binary whose operands and result are
/// laid out alike (no broadcast, no transposition), or a chain fused earlier.
fn as_chain(info: &KernelInfo<'_>, dtype: DType) -> Option<ElementwiseChain> {
    let one_box = info.outputs.len() == 1 && info.inputs.iter().all(|t| *t == info.outputs[0]);
    if !one_box {
        return None;
    }
    let value = info.operator.value;
    if let Some(u) = value.downcast_ref::<Unary>() {
        return Some(ElementwiseChain::unary(u.op(), dtype));
    }
    if let Some(b) = value.downcast_ref::<Binary>() {
        let y = names(&b.outputs()[0]);
        return b.inputs().iter().all(|d| names(d) == y).then(|| ElementwiseChain::binary(b.op(), dtype));
    }
    value.downcast_ref::<ElementwiseChain>().filter(|c| c.dtype == dtype && c.inputs == info.inputs.len()).cloned()
}

/// Two elementwise kernels over the same box, the second reading the first's result once.
fn chain(pair: &Pair<'_>) -> Option<FusedOperator> {
    let (first, second) = (as_chain(&pair.first, pair.dtype)?, as_chain(&pair.second, pair.dtype)?);
    if pair.first.outputs[0] != pair.second.outputs[0] {
        return None;
    }
    Some(Box::new(first.then(&second, pair.operand)?))
}

#[cfg(test)]
mod tests {
    use einsum_core::intra_op;

    use super::*;

    fn block(n: usize) -> TensorType {
        TensorType::zero_bounded(&[n / 8, 8])
    }

    fn run_unfused(op: &Step, ins: &[&HostTensor], dtype: DType) -> HostTensor {
        let f = |x: &HostTensor| x.to_f32();
        let data: Vec<f32> = match *op {
            Step::Unary(UnaryOp::Silu, _) => {
                let mut v = f(ins[0]);
                vexp::silu_in_place(&mut v);
                v
            }
            Step::Unary(u, _) => f(ins[0]).into_iter().map(|x| u.apply(x)).collect(),
            Step::Binary(b, ..) => f(ins[0]).into_iter().zip(f(ins[1])).map(|(x, y)| b.apply(x, y)).collect(),
        };
        HostTensor::from_f32(ins[0].ty().clone(), dtype, data).unwrap()
    }

    /// `((silu(g) · u) + r) · 0.5`: composed three times, run in one pass on any number of
    /// threads, equals the four kernels run one after another, bit for bit, in every dtype
    /// (each intermediate rounded to the storage dtype as its buffer would be).
    #[test]
    fn a_composed_chain_equals_its_kernels_run_in_turn_bit_for_bit() {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let ty = block(8 * 1000 + 8 * 37);
            let (g, u, r) = (HostTensor::random(ty.clone(), dtype, 1), HostTensor::random(ty.clone(), dtype, 2), {
                HostTensor::random(ty.clone(), dtype, 3)
            });
            let silu = ElementwiseChain::unary(UnaryOp::Silu, dtype);
            let mul = ElementwiseChain::binary(BinaryOp::Mul, dtype);
            let add = ElementwiseChain::binary(BinaryOp::Add, dtype);
            let half = ElementwiseChain::unary(UnaryOp::Scale(0.5), dtype);
            // The residual on the left of the add: `r + (silu(g)·u)`.
            let c = silu.then(&mul, 0).unwrap().then(&add, 1).unwrap().then(&half, 0).unwrap();
            assert_eq!(c.inputs(), 3);
            assert_eq!(c.steps().len(), 4);
            let s = run_unfused(&silu.steps[0], &[&g], dtype);
            let m = run_unfused(&mul.steps[0], &[&s, &u], dtype);
            let a = run_unfused(&add.steps[0], &[&r, &m], dtype);
            let want = run_unfused(&half.steps[0], &[&a], dtype);
            for helpers in [0, 1, 3] {
                let got =
                    intra_op::with_helpers(helpers, || c.compute(&[g.clone(), u.clone(), r.clone()], &ty)).unwrap();
                assert_eq!(got, want, "{dtype}, {helpers} helpers");
            }
        }
    }

    /// `tanh(sigmoid(g) · u)` fused equals the unary and binary operators' own kernels run
    /// in turn, bit for bit, in every dtype.
    #[test]
    fn sigmoid_and_tanh_fuse_as_their_operators_compute() {
        use einsum_core::TensorDesc;
        use einsum_joinagg::execute_whole;

        use crate::binary::Binary;
        use crate::unary::Unary;
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let x = TensorDesc::of(&[("a", 300), ("b", 8)], dtype).unwrap();
            let ty = x.tensor_type();
            let (g, u) = (HostTensor::random(ty.clone(), dtype, 4), HostTensor::random(ty.clone(), dtype, 5));
            let c = ElementwiseChain::unary(UnaryOp::Sigmoid, dtype)
                .then(&ElementwiseChain::binary(BinaryOp::Mul, dtype), 0)
                .unwrap()
                .then(&ElementwiseChain::unary(UnaryOp::Tanh, dtype), 0)
                .unwrap();
            let run = |op: &dyn einsum_joinagg::AbstractOperator, ins: &[HostTensor]| {
                execute_whole(op, ins).unwrap().remove(0)
            };
            let s = run(&Unary::new(&x, UnaryOp::Sigmoid).unwrap(), std::slice::from_ref(&g));
            let m = run(&Binary::new(&x, &x, BinaryOp::Mul).unwrap(), &[s, u.clone()]);
            let want = run(&Unary::new(&x, UnaryOp::Tanh).unwrap(), &[m]);
            assert_eq!(c.compute(&[g, u], &ty).unwrap(), want, "{dtype}");
        }
    }

    #[test]
    fn operands_are_renumbered_in_the_fusion_pass_order() {
        let sub = ElementwiseChain::binary(BinaryOp::Sub, DType::F32);
        let neg = ElementwiseChain::unary(UnaryOp::Neg, DType::F32);
        // `b − neg(x)`: inputs x, then b.
        let c = neg.then(&sub, 1).unwrap();
        assert_eq!(
            c.steps(),
            [
                Step::Unary(UnaryOp::Neg, Operand::Input(0)),
                Step::Binary(BinaryOp::Sub, Operand::Input(1), Operand::Step(0))
            ]
        );
        assert!(neg.then(&sub, 2).is_none());
        assert!(neg.then(&ElementwiseChain::unary(UnaryOp::Neg, DType::F16), 0).is_none());
    }

    #[test]
    fn blocks_of_another_box_or_count_are_errors() {
        let c = ElementwiseChain::binary(BinaryOp::Add, DType::F32);
        let x = HostTensor::random(block(16), DType::F32, 1);
        let y = HostTensor::random(TensorType::zero_bounded(&[16]), DType::F32, 1);
        assert!(c.compute(std::slice::from_ref(&x), x.ty()).unwrap_err().contains("2 inputs"));
        assert!(c.compute(&[x.clone(), y], x.ty()).unwrap_err().contains("one box"));
        let wrong = c.run(&[x.clone(), x.clone()], &[(x.ty().clone(), DType::F16)]).unwrap();
        assert!(wrong.is_err());
    }
}
