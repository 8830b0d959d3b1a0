//! The backends an executable runs on, as values ([`Backend`]) and by name ([`backends`],
//! the table the command line reads). A value builds the backend itself
//! ([`Backend::build`]), which implements the core contract ([`einsum_core::Backend`]):
//! `compile` holds only that `Box<dyn einsum_core::Backend>` and the executable it prepares.

use einsum_cpu::CpuBackend;
use einsum_cuda::{CudaBackend, CudaOptions};

use crate::{Error, Result};

/// The backend that runs a compiled graph.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// Virtual devices in host memory, one thread pool (the default).
    #[default]
    Cpu,
    /// NVIDIA GPUs through the CUDA driver (virtual devices share the GPUs when there are
    /// fewer GPUs than devices).
    Cuda {
        /// Issue the tasks stream-ordered on every run instead of replaying one captured
        /// CUDA graph (for debugging).
        eager: bool,
    },
}

impl Backend {
    /// The backend's name in the [`backends`] table.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Cuda { .. } => "cuda",
        }
    }

    /// The backend itself, behind the core contract: the CPU backend on every core (it
    /// runs every operator through its CPU kernel, so it refuses none), or the CUDA backend
    /// on every GPU (it refuses, naming it, an operator with no CUDA kernel).
    pub fn build(&self) -> Box<dyn einsum_core::Backend> {
        match *self {
            Backend::Cpu => Box::new(CpuBackend::new()),
            Backend::Cuda { eager } => Box::new(CudaBackend::new(CudaOptions { eager, max_gpus: None })),
        }
    }
}

/// What a backend of the [`backends`] table may be built from (what the command line gives).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendParams {
    /// On `cuda`: issue the tasks stream-ordered instead of replaying a captured graph.
    pub eager: bool,
}

/// One backend of the [`backends`] table: its command-line name, a one-line description,
/// and how to build it.
#[derive(Clone, Copy, Debug)]
pub struct BackendEntry {
    /// The name on the command line ([`Backend::name`] of what `build` returns).
    pub name: &'static str,
    /// One line on where the backend runs.
    pub about: &'static str,
    /// Builds the backend value.
    pub build: fn(&BackendParams) -> Backend,
}

const BACKENDS: &[BackendEntry] = &[
    BackendEntry { name: "cpu", about: "virtual devices in host memory", build: |_| Backend::Cpu },
    BackendEntry {
        name: "cuda",
        about: "NVIDIA GPUs through the CUDA driver",
        build: |p| Backend::Cuda { eager: p.eager },
    },
];

/// The backends, by name: the one table the command line, its help and [`backend_by_name`]
/// read.
pub fn backends() -> &'static [BackendEntry] {
    BACKENDS
}

/// The backend called `name` in the [`backends`] table; an unknown name is an error listing
/// the table.
pub fn backend_by_name(name: &str, params: &BackendParams) -> Result<Backend> {
    let entry = BACKENDS.iter().find(|e| e.name == name).ok_or_else(|| {
        let valid: Vec<&str> = BACKENDS.iter().map(|e| e.name).collect();
        Error::Usage(format!("unknown backend `{name}`; valid: {}", valid.join(", ")))
    })?;
    Ok((entry.build)(params))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_builds_the_backend_of_its_name() {
        for e in backends() {
            let value = (e.build)(&BackendParams::default());
            assert_eq!(value.name(), e.name);
            assert_eq!(value.build().name(), e.name, "the value builds the backend of its name");
        }
        let err = backend_by_name("tpu", &BackendParams::default()).unwrap_err().to_string();
        assert!(err.contains("`tpu`") && err.contains("cpu, cuda"), "{err}");
    }
}
