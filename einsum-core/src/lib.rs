//! The formalism every other Einsummable crate stands on (Section 3.1 of the paper).
//!
//! - [`Interval`] and [`TensorType`]: boxes `[lower, upper)` of integer indices, which need
//!   not start at zero, so a sub-block always knows its absolute position.
//! - [`Tiling`]: a set of boxes that covers a whole type and is pairwise disjoint
//!   (Definition 3.2), with the overlay of two tilings (Section 5.3).
//! - [`DType`] and [`HostTensor`]: dense row-major data that carries its [`TensorType`].
//! - [`TensorDesc`]: a zero-bounded type with named indices, as users see it.
//! - [`Aggregation`]: the elementwise ⊕ that combines partial outputs.
//! - [`KernelClass`]: which roofline a kernel runs at (each operator names its own).
//! - [`TaskGraph`]: the backend-independent executable IR, and the one backend contract:
//!   [`Backend`] prepares a graph with its [`KernelLibrary`] into a [`Prepared`] executable
//!   (load inputs once, run many), every failure a typed [`BackendError`].
//! - [`fsio`]: reading user files under a size cap and writing output files atomically.
//!
//! **Architecture invariant:** this crate knows nothing about operators, specs or
//! optimizers; a task graph names devices and kernels by index only.
#![warn(missing_docs)]

mod aggregation;
mod backend;
mod desc;
mod dtype;
mod error;
mod fasthash;
pub mod fsio;
pub mod host_memory;
mod host_tensor;
mod interval;
pub mod intra_op;
mod kernel_class;
mod lease;
mod rng;
pub mod taskgraph;
pub mod temporary;
mod tensor_type;
mod tiling;

pub use aggregation::{Aggregation, SOFTMAX_ROW_FLOPS, merge_softmax_rows};
pub use backend::{Backend, BackendError, KernelInfo, KernelLibrary, OperatorRef, Prepared, TaskTiming};
pub use desc::{Dim, TensorDesc};
pub use dtype::DType;
pub use error::{CoreError, Result};
pub use fasthash::{FastHasher, FastMap, FastSet};
pub use host_tensor::{Elements, HostTensor, contiguous_run, narrow, relative_error, scaled_error, widen};
pub use interval::Interval;
pub use kernel_class::KernelClass;
pub use lease::{LEASE_ALIGN, Lease};
pub use rng::SeededRng;
pub use taskgraph::{TaskGraph, TaskGraphError};
pub use tensor_type::TensorType;
pub use tiling::{Tiling, check_tiling};
