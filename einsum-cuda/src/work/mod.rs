//! Device work: every kind of operation a lowered task issues (copies, the NVRTC kernels,
//! cuBLAS GEMMs, a user's own kernel), each described once, in its own file, by a value that
//! both drives the stream executor ([`DeviceWork::issue`]) and says what it computes on the
//! host emulator ([`DeviceWork::emulate`]), so the two cannot drift apart and a new kind of
//! work is one type, not a case in two interpreters.
//!
//! [`Op`] is the closed set of the library's kinds plus [`Op::Launch`], a launch of a kernel
//! from a user's CUDA C source ([`Launch`]), which is how an operator defined outside the
//! workspace brings its GPU kernel (see [`crate::kernels::registry`]).

mod aggregate;
mod attention;
mod copy;
mod elementwise;
mod gemm;
mod grid;
mod launch;
mod reduce;
mod rope;
mod rows;

pub use aggregate::{AggSources, Aggregate, SoftmaxAggregate, softmax_coefficients};
pub use attention::Attention;
pub use copy::{BoxCopy, Memcpy};
pub use elementwise::{Binary, Unary, UnaryBinary};
pub use gemm::BatchedGemm;
pub use grid::{MAX_GRID_X, MAX_GRID_YZ, elementwise, grid, linear, rows_launch};
pub use launch::{Arg, HostFn, Launch};
pub use reduce::Reduce;
pub use rope::Rope;
pub use rows::{BinaryRmsNorm, RowKernel, Rows};

use crate::emulate::EmulatedMemory;
use crate::executor::IssueCtx;

/// One kind of device work, described once: how it is issued and what it computes.
pub trait DeviceWork: std::fmt::Debug + Send + Sync {
    /// Issues the work on the context's stream (a kernel launch, a GEMM, a copy).
    fn issue(&self, ctx: &IssueCtx<'_>) -> Result<(), String>;

    /// Computes on the emulated memory what [`DeviceWork::issue`] computes on the GPU, in the
    /// kernel's order and precision, checking the layout decisions it relies on (it panics
    /// where the GPU would read out of bounds or misaligned).
    fn emulate(&self, memory: &mut EmulatedMemory);

    /// The NVRTC kernel of the library this work launches, by the variant
    /// [`crate::addressing`] chose, for reports and checks; `None` for work whose kernel is
    /// picked at issue (row kernels, attention), for copies between buffers and GEMMs, and
    /// for a user's kernel.
    fn kernel_name(&self) -> Option<&'static str> {
        None
    }

    /// Picks the addressing variant (coalesced dimensions, index width, 16-byte accesses)
    /// from the layout, once, at lowering ([`crate::addressing`]); most work has none.
    fn specialize(&mut self) {}
}

/// One device operation.
// Built once per prepare and read on every eager issue: keeping the `Dims` inline (they are
// kernel arguments by value) costs a few hundred bytes per op and saves a pointer chase.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Op {
    /// A strided copy of a box between layouts.
    Copy(BoxCopy),
    /// A contiguous byte copy (a transfer: peer-to-peer, or within one GPU).
    Memcpy(Memcpy),
    /// The ⊕ of up to [`crate::lower::MAX_AGG_SOURCES`] blocks.
    Aggregate(Aggregate),
    /// The row-wise merge of up to [`crate::lower::MAX_AGG_SOURCES`] softmax partials.
    SoftmaxAggregate(SoftmaxAggregate),
    /// Elementwise unary.
    Unary(Unary),
    /// Elementwise binary with broadcasting.
    Binary(Binary),
    /// A unary and the binary reading it, fused.
    UnaryBinary(UnaryBinary),
    /// A binary and the RMSNorm of its result, fused.
    BinaryRmsNorm(BinaryRmsNorm),
    /// Softmax, RMSNorm or LayerNorm over one axis.
    Rows(Rows),
    /// Rotary position embedding.
    Rope(Rope),
    /// Sum or max over some indices.
    Reduce(Reduce),
    /// Attention on one block.
    Attention(Attention),
    /// A cuBLAS strided-batched GEMM.
    Gemm(BatchedGemm),
    /// A kernel of a user's CUDA C source.
    Launch(Launch),
}

/// `$body` with `$w` bound to the work inside `$op`, whichever kind it is.
macro_rules! with_work {
    ($op:expr, $w:ident => $body:expr) => {
        match $op {
            Op::Copy($w) => $body,
            Op::Memcpy($w) => $body,
            Op::Aggregate($w) => $body,
            Op::SoftmaxAggregate($w) => $body,
            Op::Unary($w) => $body,
            Op::Binary($w) => $body,
            Op::UnaryBinary($w) => $body,
            Op::BinaryRmsNorm($w) => $body,
            Op::Rows($w) => $body,
            Op::Rope($w) => $body,
            Op::Reduce($w) => $body,
            Op::Attention($w) => $body,
            Op::Gemm($w) => $body,
            Op::Launch($w) => $body,
        }
    };
}

impl Op {
    /// The work, as the one description the executor and the emulator both use.
    pub fn work(&self) -> &dyn DeviceWork {
        with_work!(self, w => w)
    }

    fn work_mut(&mut self) -> &mut dyn DeviceWork {
        with_work!(self, w => w)
    }

    /// The library NVRTC kernel this operation launches ([`DeviceWork::kernel_name`]).
    pub fn kernel_name(&self) -> Option<&'static str> {
        self.work().kernel_name()
    }

    /// Picks the operation's addressing variant ([`DeviceWork::specialize`]). Idempotent.
    pub fn specialize(&mut self) {
        self.work_mut().specialize();
    }
}
