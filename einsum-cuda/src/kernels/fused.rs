//! The operators the fusion pass ([`crate::fusion`]) makes from two adjacent kernel tasks,
//! and their CUDA lowering: each is one kernel of the CUDA backend's own, registered by type
//! in [`super::registry`] like an `einsum-ops` operator, so the lowering, the memory plan and
//! the emulator treat a fused task like any other kernel task.
//!
//! # Numerics
//! A fused kernel keeps the first operation's result in f32 and rounds once, at its store;
//! the two unfused kernels rounded that intermediate to the storage dtype in between. In f32
//! nothing changes; in f16/bf16 the fused result is the more exact one (the difference is
//! one rounding of the intermediate, within the tolerances the reference checks use).

use einsum_core::taskgraph::fuse::FusedOp;
use einsum_core::{DType, TensorType};
use einsum_ops::binary::BinaryOp;
use einsum_ops::unary::UnaryOp;

use super::registry::{FusedKernel, KernelArgs};
use crate::lower::KernelCtx;
use crate::work::{self, Op};

/// `y = f(x) ⊙ b` (or `b ⊙ f(x)`) elementwise over one block: a unary and the binary that
/// reads its result. Inputs: the unary's input `x`, the binary's other operand `b`; output:
/// the binary's result. Every block is the same box, laid out alike (row-major, the same
/// index order).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UnaryBinary {
    /// The unary f.
    pub unary: UnaryOp,
    /// The binary ⊙.
    pub binary: BinaryOp,
    /// Whether `f(x)` is the binary's left operand.
    pub unary_first: bool,
    /// The element type of every block.
    pub dtype: DType,
}

/// RMSNorm over one axis of `a ⊙ b`: a binary and the RMSNorm that reads its result (the
/// residual add before a norm). Inputs: `a`, `b`, the norm's weight; outputs: the normalized
/// rows, then, when the binary's result has other readers, that result too.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BinaryRmsNorm {
    /// The ⊙.
    pub binary: BinaryOp,
    /// The normalized axis (of the operand blocks, which are alike).
    pub axis: usize,
    /// Its whole extent (a block must hold whole rows).
    pub extent: usize,
    /// The norm's epsilon.
    pub eps: f32,
    /// The element type of every block.
    pub dtype: DType,
}

/// Checks that every block of `args` is `like`; the error names the first that is not.
fn same_blocks(args: &KernelArgs<'_>, like: &TensorType) -> Result<(), String> {
    match args.inputs.iter().chain(args.outputs).find(|b| *b != like) {
        Some(b) => Err(format!("block {b} differs from {like}: a fused elementwise kernel needs one box")),
        None => Ok(()),
    }
}

/// Checks the number of input and output pointers.
fn arity(args: &KernelArgs<'_>, inputs: usize, outputs: &[usize]) -> Result<(), String> {
    if args.ins.len() != inputs
        || args.inputs.len() != inputs
        || !outputs.contains(&args.outs.len())
        || args.outputs.len() != args.outs.len()
    {
        return Err(format!(
            "a fused kernel of {inputs} inputs and {outputs:?} outputs got {} and {}",
            args.ins.len(),
            args.outs.len()
        ));
    }
    Ok(())
}

/// Lowered to a CUDA kernel; its host run is the two original kernels in turn.
impl FusedOp for UnaryBinary {}

/// Lowered to a CUDA kernel; its host run is the two original kernels in turn.
impl FusedOp for BinaryRmsNorm {}

impl FusedKernel for UnaryBinary {
    /// One `unary_binary` launch over the block.
    fn lower(&self, args: &KernelArgs<'_>, _: &mut KernelCtx<'_>) -> Result<Vec<Op>, String> {
        arity(args, 2, &[1])?;
        let y = &args.outputs[0];
        same_blocks(args, y)?;
        let Self { unary, binary, unary_first, dtype } = *self;
        let (x, b, out) = (args.ins[0], args.ins[1], args.outs[0]);
        let n = y.volume();
        Ok(vec![Op::UnaryBinary(work::UnaryBinary {
            x,
            b,
            y: out,
            dtype,
            unary,
            binary,
            unary_first,
            n,
            vector: false,
        })])
    }
}

impl FusedKernel for BinaryRmsNorm {
    /// One `binary_rmsnorm` launch over whole rows, storing the binary's result too when the
    /// task has a second output.
    fn lower(&self, args: &KernelArgs<'_>, _: &mut KernelCtx<'_>) -> Result<Vec<Op>, String> {
        arity(args, 3, &[1, 2])?;
        let y = &args.outputs[0];
        if args.inputs[..2].iter().chain(args.outputs).any(|b| b != y) {
            return Err(format!("the operand, result and sum blocks of a fused RMSNorm differ from {y}"));
        }
        if self.axis >= y.rank() || y.dim(self.axis).len() != self.extent {
            return Err(format!("block {y} does not hold whole rows of axis {} ({})", self.axis, self.extent));
        }
        let shape = y.shape();
        let outer = shape[..self.axis].iter().product();
        let inner = shape[self.axis + 1..].iter().product();
        Ok(vec![Op::BinaryRmsNorm(work::BinaryRmsNorm {
            a: args.ins[0],
            b: args.ins[1],
            w: args.ins[2],
            sum: args.outs.get(1).copied(),
            y: args.outs[0],
            dtype: self.dtype,
            binary: self.binary,
            outer,
            n: self.extent,
            inner,
            eps: self.eps,
        })])
    }
}
