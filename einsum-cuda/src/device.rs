//! Per-GPU state: the context, the compiled kernel functions, the allocation pool and the
//! constant tables; device memory that the host fills (resident inputs); and the pinned host
//! memory that Store tasks write.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, DriverError, result, sys};

use crate::kernels::attention::AttentionModule;
use crate::kernels::compile::{arch_name, compile};
use crate::kernels::sources::{FIXED, Module};

/// Turns a driver error during setup into a message naming what was being done.
pub fn setup_error(what: &str) -> impl Fn(DriverError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// A raw device allocation, freed on drop.
#[derive(Debug)]
pub struct DeviceMemory {
    ctx: Arc<CudaContext>,
    /// The device address.
    pub ptr: sys::CUdeviceptr,
    /// Its size.
    pub bytes: usize,
}

impl DeviceMemory {
    /// Allocates `bytes` (at least 1) on `ctx`'s GPU.
    pub fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Self, String> {
        ctx.bind_to_thread().map_err(setup_error("binding the CUDA context"))?;
        // SAFETY: a plain allocation with the context current; freed in `drop`.
        let ptr = unsafe { result::malloc_sync(bytes.max(1)) }
            .map_err(|e| format!("allocating a pool of {bytes} bytes on GPU {}: {e}", ctx.ordinal()))?;
        Ok(Self { ctx: ctx.clone(), ptr, bytes })
    }

    /// Allocates and fills with `data`.
    pub fn from_bytes(ctx: &Arc<CudaContext>, data: &[u8]) -> Result<Self, String> {
        let m = Self::new(ctx, data.len())?;
        if !data.is_empty() {
            // SAFETY: `m` holds at least `data.len()` bytes.
            unsafe { result::memcpy_htod_sync(m.ptr, data) }.map_err(setup_error("uploading a constant table"))?;
        }
        Ok(m)
    }

    /// Copies `data` to `offset` bytes into this allocation and waits until the copy is
    /// complete on the device (a copy from pageable memory may return before its DMA ends;
    /// the next run must see the bytes).
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<(), String> {
        if offset + data.len() > self.bytes {
            return Err(format!("{} bytes at offset {offset} overrun an allocation of {}", data.len(), self.bytes));
        }
        if data.is_empty() {
            return Ok(());
        }
        self.ctx.bind_to_thread().map_err(setup_error("binding the CUDA context"))?;
        // SAFETY: the range lies in the allocation (checked above); no run is in flight while
        // the host writes (runs synchronize before returning, and loading takes `&mut`).
        unsafe { result::memcpy_htod_sync(self.ptr + offset as u64, data) }
            .map_err(|e| format!("copying {} bytes to GPU {}: {e}", data.len(), self.ctx.ordinal()))?;
        self.ctx.synchronize().map_err(|e| format!("synchronizing GPU {}: {e}", self.ctx.ordinal()))
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by `malloc_sync` and freed once; errors at teardown are ignored.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// Pinned host memory mapped into every context's address space: Store tasks write whole
/// outputs to it, so the captured graph writes fixed addresses and `run` only copies on the
/// host.
#[derive(Debug)]
pub struct HostMemory {
    ctx: Arc<CudaContext>,
    host: *mut std::ffi::c_void,
    /// Its address as seen by kernels.
    pub device_ptr: sys::CUdeviceptr,
    /// Its size.
    pub bytes: usize,
}

// SAFETY: the pinned allocation is owned by this value; access goes through `&self`/`&mut self`.
unsafe impl Send for HostMemory {}

impl HostMemory {
    /// Allocates `bytes` (at least 1) of portable, device-mapped pinned memory.
    pub fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Self, String> {
        ctx.bind_to_thread().map_err(setup_error("binding the CUDA context"))?;
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: a pinned allocation with the context current; freed in `drop`.
        let host = unsafe { result::malloc_host(bytes.max(1), flags) }
            .map_err(|e| format!("allocating {bytes} bytes of pinned host memory: {e}"))?;
        let mut device_ptr: sys::CUdeviceptr = 0;
        // SAFETY: `host` was returned by cuMemHostAlloc with DEVICEMAP.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device_ptr, host, 0) };
        let mem = Self { ctx: ctx.clone(), host, device_ptr, bytes };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(format!("mapping pinned host memory into the GPU's address space: {r:?}"));
        }
        Ok(mem)
    }

    /// The contents (`bytes` bytes).
    pub fn read(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.bytes];
        // SAFETY: `host` holds `bytes` bytes; the GPU work writing it has been synchronized.
        unsafe { std::ptr::copy_nonoverlapping(self.host as *const u8, out.as_mut_ptr(), self.bytes) };
        out
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by `malloc_host` and freed once.
            let _ = unsafe { result::free_host(self.host) };
        }
    }
}

/// One GPU: its context, its kernels (by name; attention by name and head dimension) and
/// its pool.
#[derive(Debug)]
pub struct Gpu {
    /// The context.
    pub ctx: Arc<CudaContext>,
    /// The kernels of the fixed modules and of users' modules, by kernel name.
    pub functions: HashMap<&'static str, CudaFunction>,
    /// The attention kernels, by entry point and head dimension.
    pub attention: HashMap<(&'static str, usize), CudaFunction>,
    /// The allocation pool.
    pub pool: DeviceMemory,
}

impl Gpu {
    /// Opens GPU `ordinal`, compiles and loads every fixed kernel module, the users' `modules`
    /// and the `attention` modules (the tensor-core ones only on sm_80 and later, where
    /// `mma.sync` exists, so that issuing one elsewhere fails naming the capability), and
    /// allocates a pool of `pool_bytes`.
    pub fn open(
        ordinal: usize,
        modules: &[Module],
        attention_modules: &[AttentionModule],
        pool_bytes: usize,
    ) -> Result<Gpu, String> {
        let ctx = CudaContext::new(ordinal).map_err(|e| format!("opening GPU {ordinal}: {e}"))?;
        // The backend orders work with its own events; cudarc's per-slice tracking would add
        // waits of its own (and it never sees our raw pointers anyway).
        // SAFETY: no cudarc-managed slice is shared between streams by this backend.
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx.compute_capability().map_err(setup_error("reading the compute capability"))?;
        let arch = arch_name(major, minor);
        let mut functions = HashMap::new();
        for module in FIXED.iter().chain(modules) {
            let ptx = compile(module, &[], arch)?;
            let m = ctx.load_module(ptx).map_err(|e| format!("loading kernel module `{}`: {e}", module.name))?;
            for k in module.kernels {
                let f = m.load_function(k).map_err(|e| format!("loading kernel `{k}`: {e}"))?;
                functions.insert(*k, f);
            }
        }
        let mut attention = HashMap::new();
        for am in attention_modules.iter().filter(|m| !m.tensor_cores || major >= 8) {
            let (module, defines) = am.source();
            let d = am.head_dim;
            let ptx = compile(module, &defines, arch)?;
            let m = ctx.load_module(ptx).map_err(|e| format!("loading `{}` (head dim {d}): {e}", module.name))?;
            let shared = am.shared_bytes() as i32;
            for k in module.kernels {
                let f = m.load_function(k).map_err(|e| format!("loading `{k}`: {e}"))?;
                if shared > 0 {
                    // Dynamic shared memory past 48 KiB must be asked for per kernel.
                    f.set_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
                        .map_err(|e| format!("giving `{k}` (head dim {d}) {shared} bytes of shared memory: {e}"))?;
                }
                attention.insert((*k, d), f);
            }
        }
        let pool = DeviceMemory::new(&ctx, pool_bytes)?;
        Ok(Gpu { ctx, functions, attention, pool })
    }
}

/// Lets every pair of GPUs access each other's memory where the hardware allows, so peer
/// copies go over NVLink/PCIe directly. Pairs that cannot are left alone (copies still work,
/// staged by the driver).
pub fn enable_peer_access(gpus: &[Gpu]) {
    for a in gpus {
        for b in gpus {
            if a.ctx.ordinal() == b.ctx.ordinal() {
                continue;
            }
            let mut can = 0;
            // SAFETY: plain queries and a context flag; "already enabled" is harmless.
            unsafe {
                if sys::cuDeviceCanAccessPeer(&mut can, a.ctx.cu_device(), b.ctx.cu_device())
                    == sys::CUresult::CUDA_SUCCESS
                    && can == 1
                    && a.ctx.bind_to_thread().is_ok()
                {
                    let _ = sys::cuCtxEnablePeerAccess(b.ctx.cu_ctx(), 0);
                }
            }
        }
    }
}
