//! The operator library: every operator is an [`AbstractOperator`] that builds its own
//! join-agg specs and carries a CPU reference kernel (computing in f32 whatever the
//! storage dtype). One operator per file; adding an operator touches this crate only.
//!
//! **Architecture invariant:** operators know nothing of devices, costs or optimizers.
//!
//! [`AbstractOperator`]: einsum_joinagg::AbstractOperator
#![warn(missing_docs)]

pub mod argmax;
pub mod attention;
pub mod binary;
pub mod cached_attention;
pub mod cast;
mod common;
pub mod concat;
pub mod einsum;
pub mod embedding;
pub mod epilogue;
mod few_rows;
pub mod fused;
pub mod layernorm;
pub mod packing;
mod panels;
mod parallel;
pub mod reduce;
pub mod rmsnorm;
pub mod rope;
pub mod rope_at;
pub mod slice;
pub mod softmax;
pub mod unary;
mod vexp;

pub use packing::Packing;
