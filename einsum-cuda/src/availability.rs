//! Whether CUDA can be used here: the driver, cuBLAS and NVRTC libraries are loaded
//! dynamically, and cudarc panics when one is missing, so every entry point asks first and
//! turns absence into [`BackendError::Unavailable`].

use einsum_core::BackendError;

/// True when the NVRTC library can be loaded (it needs no GPU: kernels can be compiled to
/// PTX on any machine that has it).
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to open the shared library; no symbol is called.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Checks that the CUDA driver, cuBLAS and NVRTC libraries load and that the driver sees at
/// least one GPU; returns the number of GPUs. Never panics.
pub fn check_cuda() -> Result<usize, BackendError> {
    // SAFETY: each call only tries to open a shared library.
    let (driver, cublas) =
        unsafe { (cudarc::driver::sys::is_culib_present(), cudarc::cublas::sys::is_culib_present()) };
    if !driver {
        return Err(BackendError::Unavailable(
            "no CUDA driver found (libcuda.so could not be loaded; is an NVIDIA driver installed?)".into(),
        ));
    }
    if !cublas {
        return Err(BackendError::Unavailable("no cuBLAS found (libcublas.so could not be loaded)".into()));
    }
    if !nvrtc_present() {
        return Err(BackendError::Unavailable("no NVRTC found (libnvrtc.so could not be loaded)".into()));
    }
    let count =
        cudarc::driver::result::init().and_then(|()| cudarc::driver::result::device::get_count()).map_err(|e| {
            BackendError::Unavailable(format!("no CUDA driver found with a usable GPU (cuInit failed: {e})"))
        })?;
    if count < 1 {
        return Err(BackendError::Unavailable("no CUDA driver found with a usable GPU (0 devices)".into()));
    }
    Ok(count as usize)
}
