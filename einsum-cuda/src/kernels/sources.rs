//! The CUDA C sources of the NVRTC kernels, one `.cu` file per concept under
//! `src/kernels/cuda/`, each compiled with the header of operation codes generated from the
//! Rust enums ([`super::codes::header`]) and the shared `common.cuh` (dtype loads and
//! stores, strided iteration) prepended, so that NVRTC needs no system header.

/// The shared prelude: dtype codes, `ld`/`st`, the `Dims` iteration space.
pub const COMMON: &str = include_str!("cuda/common.cuh");

/// One compilable module: its name, the kernels it defines, and its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Module {
    /// The module's name (its file stem).
    pub name: &'static str,
    /// The `extern "C"` kernels it defines.
    pub kernels: &'static [&'static str],
    /// Its source, without the prelude.
    pub source: &'static str,
}

/// The box copy (slice, stitch, load, store, permute): strided with 64- and 32-bit
/// indexing, and the 16-byte contiguous copy.
pub const COPY: Module =
    Module { name: "copy", kernels: &["box_copy", "box_copy32", "copy_vec"], source: include_str!("cuda/copy.cu") };
/// The k-way ⊕ of aggregation tasks, scalar and 16-byte, and the row-wise merge of
/// softmax partials (`aggregate_softmax`).
pub const AGGREGATE: Module = Module {
    name: "aggregate",
    kernels: &["aggregate", "aggregate_vec", "aggregate_softmax"],
    source: include_str!("cuda/aggregate.cu"),
};
/// Unary elementwise operations, scalar and 16-byte.
pub const UNARY: Module =
    Module { name: "unary", kernels: &["unary", "unary_vec"], source: include_str!("cuda/unary.cu") };
/// Binary elementwise operations with named broadcasting (64- and 32-bit indexing), and the
/// same-shape 16-byte case.
pub const BINARY: Module =
    Module { name: "binary", kernels: &["binary", "binary32", "binary_vec"], source: include_str!("cuda/binary.cu") };
/// Softmax, RMSNorm and LayerNorm over one axis, RMSNorm writing a slice of each row (an
/// output-only split of the axis, `rmsnorm_slice`), and the RMSNorm of a binary's result
/// (`binary_rmsnorm`, made by the fusion pass, [`crate::fusion`]).
pub const ROWS: Module = Module {
    name: "rows",
    kernels: &["softmax", "rmsnorm", "rmsnorm_slice", "layernorm", "binary_rmsnorm"],
    source: include_str!("cuda/rows.cu"),
};
/// A binary with a unary applied to one operand, in one pass (made by the fusion pass,
/// [`crate::fusion`]), scalar and 16-byte.
pub const FUSED: Module =
    Module { name: "fused", kernels: &["unary_binary", "unary_binary_vec"], source: include_str!("cuda/fused.cu") };
/// Rotary position embeddings.
pub const ROPE: Module = Module { name: "rope", kernels: &["rope"], source: include_str!("cuda/rope.cu") };
/// Sum and max reductions (64- and 32-bit indexing).
pub const REDUCE: Module =
    Module { name: "reduce", kernels: &["reduce", "reduce32"], source: include_str!("cuda/reduce.cu") };
/// Attention on CUDA cores; compiled per head dimension with its tile sizes
/// ([`super::attention::AttentionModule::source`]).
pub const ATTENTION_SIMT: Module =
    Module { name: "attention_simt", kernels: &["attention_simt"], source: include_str!("cuda/attention_simt.cu") };
/// FlashAttention-2 on tensor cores (sm_80+, f16 and bf16); compiled per head dimension
/// with its tile sizes ([`super::attention::AttentionModule::source`]).
pub const ATTENTION_MMA: Module = Module {
    name: "attention_mma",
    kernels: &["attention_mma_f16", "attention_mma_bf16"],
    source: include_str!("cuda/attention_mma.cu"),
};

/// Both attention modules.
pub const ATTENTION: [Module; 2] = [ATTENTION_SIMT, ATTENTION_MMA];

/// Every module whose source does not depend on the operator (attention is compiled per
/// head dimension).
pub const FIXED: [Module; 8] = [COPY, AGGREGATE, UNARY, BINARY, ROWS, ROPE, REDUCE, FUSED];

/// The full source of `module`: `defines` (`NAME=value`) as `#define` lines, the generated
/// operation codes ([`super::codes::header`]), the prelude, then the module.
pub fn full_source(module: &Module, defines: &[(&str, String)]) -> String {
    let mut s = String::new();
    for (k, v) in defines {
        s.push_str(&format!("#define {k} {v}\n"));
    }
    s.push_str(&super::codes::header());
    s.push_str(COMMON);
    s.push('\n');
    s.push_str(module.source);
    s
}
