//! Compiling a kernel module to PTX with NVRTC.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use cudarc::nvrtc::{CompileOptions, Ptx, compile_ptx_with_opts};

use super::sources::{Module, full_source};

/// PTX already compiled in this process, by full source and architecture.
type Cache = Mutex<HashMap<(String, Option<&'static str>), Ptx>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// NVRTC invocations so far in this process (what the cache saves).
static COMPILATIONS: AtomicUsize = AtomicUsize::new(0);

/// Compiles `module` (with the prelude and `defines`) for the virtual architecture `arch`
/// (e.g. `compute_90`; `None` takes NVRTC's default). The error carries NVRTC's log.
/// Callers must have checked [`crate::availability::nvrtc_present`].
///
/// The PTX is cached for the life of the process: every prepared executable (and every GPU
/// it uses) loads the same modules, and NVRTC takes a good fraction of a second per module,
/// which over the many executables of a test run would cost minutes.
pub fn compile(module: &Module, defines: &[(&str, String)], arch: Option<&'static str>) -> Result<Ptx, String> {
    let source = full_source(module, defines);
    let key = (source, arch);
    if let Some(ptx) = cache().lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(ptx.clone());
    }
    let opts = CompileOptions {
        arch,
        name: Some(format!("{}.cu", module.name)),
        options: vec!["--std=c++17".into()],
        ..Default::default()
    };
    COMPILATIONS.fetch_add(1, Ordering::Relaxed);
    let ptx = compile_ptx_with_opts(&key.0, opts).map_err(|e| match e {
        cudarc::nvrtc::CompileError::CompileError { log, .. } => {
            format!("NVRTC failed on kernel module `{}`:\n{}", module.name, log.to_string_lossy())
        }
        other => format!("NVRTC failed on kernel module `{}`: {other:?}", module.name),
    })?;
    cache().lock().unwrap_or_else(|p| p.into_inner()).insert(key, ptx.clone());
    Ok(ptx)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::attention::AttentionModule;
    use crate::kernels::sources::COPY;

    #[test]
    #[ignore = "needs NVRTC (libnvrtc.so); .ci/run runs it"]
    fn a_module_is_compiled_once_per_source_and_architecture() {
        assert!(crate::availability::nvrtc_present(), "no NVRTC found (libnvrtc.so could not be loaded)");
        let attention = |head_dim: usize| {
            let (module, defines) = AttentionModule { tensor_cores: false, head_dim }.source();
            compile(module, &defines, Some("compute_90")).unwrap().to_src()
        };
        let first = attention(48);
        let before = COMPILATIONS.load(Ordering::Relaxed);
        let again = attention(48);
        assert_eq!(first, again);
        assert_eq!(COMPILATIONS.load(Ordering::Relaxed), before, "the same source was compiled again");
        // Another head dimension or architecture is another module.
        assert_ne!(attention(80), first);
        compile(&COPY, &[], Some("compute_80")).unwrap();
        assert!(COMPILATIONS.load(Ordering::Relaxed) >= before + 2);
    }
}
