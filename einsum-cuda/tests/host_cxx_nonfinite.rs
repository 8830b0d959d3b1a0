//! NaN and the infinities through the memory-bound kernels' CUDA C, compiled for the host as
//! `host_cxx.rs` does (the stand-ins of `host_cxx/prelude.h`, one thread after another):
//! `host_cxx/nonfinite.cpp` checks that relu, max, the Max and Min aggregations, the fused
//! relu·max and the Max reduction propagate NaN as NumPy's `maximum`, `minimum` and `max`
//! (`fmaxf` and `fminf` would return the other operand), on the scalar, vector and 32-bit
//! entries, in f32, f16 and bf16.
//!
//! Ignored by default like `host_cxx.rs` (g++ 12 or later with `_Float16`); run it with
//! `--include-ignored`. `EINSUMMABLE_CXX` names another compiler.

use std::path::PathBuf;
use std::process::Command;

use einsum_cuda::kernels::sources::{self, Module};

/// The modules run on the host.
const MODULES: [Module; 5] = [sources::UNARY, sources::BINARY, sources::AGGREGATE, sources::REDUCE, sources::FUSED];

/// The PTX of `common.cuh`'s f16 conversions and their host stand-ins (`prelude.h`).
const INLINE_PTX: [(&str, &str); 2] = [
    (r#"asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));"#, "f = host_h2f(h);"),
    (r#"asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));"#, "h = host_f2h(v);"),
];

fn cxx() -> PathBuf {
    std::env::var_os("EINSUMMABLE_CXX").map_or_else(|| PathBuf::from("g++"), PathBuf::from)
}

#[test]
#[ignore = "needs g++ 12+ with _Float16; run with --include-ignored"]
fn memory_bound_kernels_propagate_nan_as_numpy() {
    let dir = std::env::temp_dir().join(format!("einsummable-host-cxx-nonfinite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    std::fs::write(dir.join("prelude.h"), include_str!("host_cxx/prelude.h")).unwrap();
    std::fs::write(dir.join("main.cpp"), include_str!("host_cxx/nonfinite.cpp")).unwrap();
    let mut units = vec![dir.join("main.cpp")];
    for m in MODULES {
        let mut source = sources::full_source(&m, &[]);
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
