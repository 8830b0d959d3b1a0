//! Compiling a kernel module to PTX with NVRTC.

use cudarc::nvrtc::{CompileOptions, Ptx, compile_ptx_with_opts};

use super::sources::{Module, full_source};

/// Compiles `module` (with the prelude and `defines`) for the virtual architecture `arch`
/// (e.g. `compute_90`; `None` takes NVRTC's default). The error carries NVRTC's log.
/// Callers must have checked [`crate::availability::nvrtc_present`].
pub fn compile(module: &Module, defines: &[(&str, String)], arch: Option<&'static str>) -> Result<Ptx, String> {
    let opts = CompileOptions {
        arch,
        name: Some(format!("{}.cu", module.name)),
        options: vec!["--std=c++17".into()],
        ..Default::default()
    };
    compile_ptx_with_opts(full_source(module, defines), opts).map_err(|e| match e {
        cudarc::nvrtc::CompileError::CompileError { log, .. } => {
            format!("NVRTC failed on kernel module `{}`:\n{}", module.name, log.to_string_lossy())
        }
        other => format!("NVRTC failed on kernel module `{}`: {other:?}", module.name),
    })
}

/// The NVRTC `--gpu-architecture` name of compute capability `major.minor`, for the
/// capabilities CUDA 13 supports (7.5 and later); others fall back to NVRTC's default.
pub fn arch_name(major: i32, minor: i32) -> Option<&'static str> {
    Some(match (major, minor) {
        (7, 5) => "compute_75",
        (8, 0) => "compute_80",
        (8, 6) => "compute_86",
        (8, 7) => "compute_87",
        (8, 9) => "compute_89",
        (9, 0) => "compute_90",
        (10, 0) => "compute_100",
        (10, 3) => "compute_103",
        (12, 0) => "compute_120",
        (12, 1) => "compute_121",
        _ => return None,
    })
}
