//! Compiles every kernel source to PTX with NVRTC (no GPU needed), so CUDA C errors are
//! caught on any machine that has NVRTC. Ignored by default (libnvrtc is not part of the
//! Rust toolchain); `.ci/run` installs it from PyPI and runs them with `--include-ignored`,
//! where a missing libnvrtc fails them.

use einsum_cuda::availability::nvrtc_present;
use einsum_cuda::kernels::{compile::compile, sources};

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
    for d in [32, 64, 128, 256] {
        let ptx = compile(&sources::ATTENTION, &[("HEAD_DIM", d.to_string())], Some("compute_90"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(ptx.to_src().contains(".entry attention"));
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
