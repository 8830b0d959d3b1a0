//! Runs the memory-bound kernels' CUDA C on the host: each module's full source (generated
//! codes, `common.cuh`, the module) is compiled by a C++ compiler with the stand-ins of
//! `host_cxx/prelude.h` for the CUDA built-ins, and a driver launches every kernel over a
//! small grid, one thread after another (these kernels use no shared memory or barriers).
//! It checks, without a GPU, what the emulator cannot:
//! - `host_cxx/main.cpp`: that the vector (`copy_vec`, `unary_vec`, `binary_vec`,
//!   `aggregate_vec`) and 32-bit (`box_copy32`, `binary32`, `reduce32`) entry points write
//!   exactly what the scalar 64-bit ones write, byte for byte, that `aggregate` folds its
//!   sources left to right in f32, and that the fused `unary_binary` (and its vector entry)
//!   writes the unfused unary and binary run in f32, rounded once;
//! - `host_cxx/nonfinite.cpp`: that relu, max, the Max and Min aggregations, the fused
//!   relu·max and the Max reduction propagate NaN as NumPy's `maximum`, `minimum` and `max`
//!   (`fmaxf` and `fminf` would return the other operand), on the scalar, vector and 32-bit
//!   entries, in f32, f16 and bf16.
//!
//! Ignored by default (it needs g++ 12 or later with `_Float16`, as on x86-64 Debian 12);
//! `.ci/run` runs it with `--include-ignored`. `EINSUMMABLE_CXX` names another compiler.

use std::path::PathBuf;
use std::process::Command;

use einsum_cuda::kernels::sources::{self, Module};

/// The PTX of `common.cuh`'s f16 conversions and their host stand-ins (`prelude.h`).
const INLINE_PTX: [(&str, &str); 2] = [
    (r#"asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));"#, "f = host_h2f(h);"),
    (r#"asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));"#, "h = host_f2h(v);"),
];

fn cxx() -> PathBuf {
    std::env::var_os("EINSUMMABLE_CXX").map_or_else(|| PathBuf::from("g++"), PathBuf::from)
}

/// Compiles `modules` with the driver `main_cpp` for the host in a scratch directory named
/// after `name`, runs it, and asserts that it reports no failure.
fn build_and_run(name: &str, main_cpp: &str, modules: &[Module]) {
    let dir = std::env::temp_dir().join(format!("einsummable-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    std::fs::write(dir.join("prelude.h"), include_str!("host_cxx/prelude.h")).unwrap();
    std::fs::write(dir.join("kernels.h"), include_str!("host_cxx/kernels.h")).unwrap();
    std::fs::write(dir.join("main.cpp"), main_cpp).unwrap();
    let mut units = vec![dir.join("main.cpp")];
    for m in modules {
        let mut source = sources::full_source(m, &[]);
        for (ptx, host) in INLINE_PTX {
            assert!(source.contains(ptx), "common.cuh no longer has `{ptx}`: update INLINE_PTX");
            source = source.replace(ptx, host);
        }
        assert!(!source.contains("asm("), "module {} has inline PTX without a host stand-in", m.name);
        let unit = dir.join(format!("{}.cpp", m.name));
        std::fs::write(&unit, format!("#include \"prelude.h\"\n{source}")).unwrap();
        units.push(unit);
    }
    let binary = dir.join("kernels");
    let built = Command::new(cxx())
        .args(["-std=c++17", "-O1", "-w", "-o"])
        .arg(&binary)
        .args(&units)
        .output()
        .unwrap_or_else(|e| panic!("could not run {} ({e}); set EINSUMMABLE_CXX", cxx().display()));
    assert!(built.status.success(), "the host build failed:\n{}", String::from_utf8_lossy(&built.stderr));
    let run = Command::new(&binary).output().expect("the host kernels run");
    let report = String::from_utf8_lossy(&run.stdout);
    println!("{report}");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(run.status.success() && report.contains("fails: 0"), "{report}");
}

#[test]
#[ignore = "needs g++ 12+ with _Float16; .ci/run runs it"]
fn vector_and_32_bit_kernels_write_what_the_scalar_ones_write() {
    let modules = [sources::COPY, sources::UNARY, sources::BINARY, sources::AGGREGATE, sources::REDUCE, sources::FUSED];
    build_and_run("host-cxx", include_str!("host_cxx/main.cpp"), &modules);
}

#[test]
#[ignore = "needs g++ 12+ with _Float16; .ci/run runs it"]
fn memory_bound_kernels_propagate_nan_as_numpy() {
    let modules = [sources::UNARY, sources::BINARY, sources::AGGREGATE, sources::REDUCE, sources::FUSED];
    build_and_run("host-cxx-nonfinite", include_str!("host_cxx/nonfinite.cpp"), &modules);
}
