//! Compiles every kernel source to PTX with NVRTC (no GPU needed), so CUDA C errors are
//! caught on any machine that has NVRTC. Ignored by default (libnvrtc is not part of the
//! Rust toolchain); `.ci/run` installs it from PyPI and runs them with `--include-ignored`,
//! where a missing libnvrtc fails them.

use einsum_core::{Aggregation, DType};
use einsum_cuda::availability::nvrtc_present;
use einsum_cuda::kernels::attention::{AttentionModule, MMA_HEAD_DIMS};
use einsum_cuda::kernels::codes::{self, OpCode};
use einsum_cuda::kernels::{compile::compile, sources};

/// Every attention module the backend can ask for at the head dims tests use (the CUDA-core
/// kernel at odd and large head dims too).
fn attention_modules() -> Vec<AttentionModule> {
    let simt = [32, 48, 64, 128, 256].map(|head_dim| AttentionModule { tensor_cores: false, head_dim });
    let mma = MMA_HEAD_DIMS.map(|head_dim| AttentionModule { tensor_cores: true, head_dim });
    simt.into_iter().chain(mma).collect()
}
use einsum_ops::binary::BinaryOp;
use einsum_ops::reduce::ReduceOp;
use einsum_ops::unary::UnaryOp;

#[test]
#[ignore = "needs NVRTC (libnvrtc.so); .ci/run runs it"]
fn every_kernel_source_compiles_to_ptx() {
    assert!(nvrtc_present(), "no NVRTC found (libnvrtc.so could not be loaded)");
    for module in sources::FIXED {
        let ptx = compile(&module, &[], Some("compute_90")).unwrap_or_else(|e| panic!("{e}"));
        let text = ptx.to_src();
        for k in module.kernels {
            assert!(text.contains(&format!(".entry {k}")), "module {} lacks kernel {k}", module.name);
        }
    }
    for module in attention_modules() {
        let (source, defines) = module.source();
        let ptx = compile(source, &defines, Some("compute_90")).unwrap_or_else(|e| panic!("{e}"));
        for k in source.kernels {
            assert!(ptx.to_src().contains(&format!(".entry {k}")), "{module:?} lacks kernel {k}");
        }
    }
}

#[test]
#[ignore = "needs NVRTC (libnvrtc.so); .ci/run runs it"]
fn a_broken_source_reports_the_log() {
    assert!(nvrtc_present(), "no NVRTC found (libnvrtc.so could not be loaded)");
    let broken = sources::Module { name: "broken", kernels: &[], source: "extern \"C\" __global__ void f() { nope; }" };
    let err = compile(&broken, &[], None).unwrap_err();
    assert!(err.contains("broken") && err.contains("nope"), "{err}");
}

/// A statement using every code of `T` by its generated name: through the generated
/// function where there is one, else as a value.
fn uses<T: OpCode>() -> String {
    let mut s = String::new();
    for r in T::ROWS {
        let name = format!("{}_{}", T::PREFIX, r.name);
        match T::APPLY {
            Some(apply) => {
                let f = &apply[..apply.find('(').unwrap()];
                s.push_str(&format!("    acc += {f}({name}, x, 0.5f);\n"));
            }
            None => s.push_str(&format!("    acc += (float){name};\n")),
        }
    }
    s
}

/// The generated header compiles, and every code of every Rust enum, by its generated name,
/// reaches CUDA C: a kernel that applies each one compiles to PTX.
#[test]
#[ignore = "needs NVRTC (libnvrtc.so); .ci/run runs it"]
fn every_generated_code_compiles() {
    assert!(nvrtc_present(), "no NVRTC found (libnvrtc.so could not be loaded)");
    let body = [uses::<DType>(), uses::<Aggregation>(), uses::<UnaryOp>(), uses::<BinaryOp>(), uses::<ReduceOp>()];
    let source = format!(
        "extern \"C\" __global__ void codes_check(float* y, float x) {{\n    float acc = 0.0f;\n{}    *y = acc;\n}}\n",
        body.concat()
    );
    assert!(source.contains("unary_apply(UNARY_GELU") && source.contains("(float)REDUCE_MAX"), "{source}");
    let module =
        sources::Module { name: "codes", kernels: &["codes_check"], source: Box::leak(source.into_boxed_str()) };
    assert!(sources::full_source(&module, &[]).contains(&codes::header()));
    let ptx = compile(&module, &[], Some("compute_90")).unwrap_or_else(|e| panic!("{e}"));
    assert!(ptx.to_src().contains(".entry codes_check"));
}
