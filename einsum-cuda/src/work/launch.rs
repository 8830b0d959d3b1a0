//! A launch of a kernel from a user's CUDA C source: how an operator defined outside the
//! workspace brings its own GPU kernel. Its lowering ([`crate::kernels::registry::CudaKernel`])
//! returns [`Op::Launch`](super::Op::Launch) values; the module is compiled with NVRTC on
//! every GPU at prepare (with the library's prelude: the `DTYPE_*` codes, `ld`/`st` in any
//! storage dtype, `Dims`, `GRID_STRIDE`), and the host mirror the user gives says what it
//! computes, so the emulator can run and check the plan without a GPU.

use std::fmt;
use std::sync::Arc;

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::DeviceWork;
use super::grid::launch_err;
use crate::emulate::EmulatedMemory;
use crate::executor::IssueCtx;
use crate::kernels::sources::Module;
use crate::lower::Ptr;

/// One argument of a [`Launch`], passed by value in order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    /// A device pointer (`void*`, `const void*`): the address of a block, scratch area or
    /// constant table.
    Ptr(Ptr),
    /// A `long long` (the prelude's `i64`).
    I64(i64),
    /// An `int`.
    I32(i32),
    /// A `float`.
    F32(f32),
}

/// The host mirror of a user's kernel: computes on the emulated memory what the kernel
/// computes on the GPU (reading and writing through the same pointers).
pub type HostFn = Arc<dyn Fn(&mut EmulatedMemory) + Send + Sync>;

/// A launch of kernel `entry` of a user's `module`.
#[derive(Clone)]
pub struct Launch {
    module: Module,
    entry: &'static str,
    args: Vec<Arg>,
    config: LaunchConfig,
    host: HostFn,
}

impl Launch {
    /// The launch of `entry` (one of `module.kernels`) with `args` and `config`, whose
    /// effect on the emulated memory is `host`.
    ///
    /// Fails when `module` does not define `entry`.
    ///
    /// # Safety
    /// `args` must match `entry`'s parameters in number, order and type (a device pointer
    /// for [`Arg::Ptr`], `long long`, `int`, `float`), and the kernel, launched with
    /// `config`, must read and write only within the blocks, scratch areas and tables its
    /// pointers address (their extents are the lowering's to know). The GPU checks neither.
    pub unsafe fn new(
        module: Module,
        entry: &'static str,
        args: Vec<Arg>,
        config: LaunchConfig,
        host: HostFn,
    ) -> Result<Launch, String> {
        if !module.kernels.contains(&entry) {
            return Err(format!(
                "module `{}` defines no kernel `{entry}` (it lists {:?})",
                module.name, module.kernels
            ));
        }
        Ok(Launch { module, entry, args, config, host })
    }

    /// The module the kernel comes from.
    pub fn module(&self) -> &Module {
        &self.module
    }

    /// The kernel.
    pub fn entry(&self) -> &'static str {
        self.entry
    }

    /// The arguments, in order.
    pub fn args(&self) -> &[Arg] {
        &self.args
    }
}

impl fmt::Debug for Launch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Launch")
            .field("module", &self.module.name)
            .field("entry", &self.entry)
            .field("args", &self.args)
            .field("grid", &self.config.grid_dim)
            .field("block", &self.config.block_dim)
            .field("shared_mem_bytes", &self.config.shared_mem_bytes)
            .finish_non_exhaustive()
    }
}

/// An argument's value at issue time.
enum Value {
    U64(u64),
    I64(i64),
    I32(i32),
    F32(f32),
}

impl DeviceWork for Launch {
    fn issue(&self, ctx: &IssueCtx<'_>) -> Result<(), String> {
        let f = ctx.function(self.entry)?;
        let values: Vec<Value> = self
            .args
            .iter()
            .map(|a| match *a {
                Arg::Ptr(p) => Value::U64(ctx.addr(p)),
                Arg::I64(x) => Value::I64(x),
                Arg::I32(x) => Value::I32(x),
                Arg::F32(x) => Value::F32(x),
            })
            .collect();
        let mut b = ctx.stream().launch_builder(f);
        for v in &values {
            match v {
                Value::U64(x) => b.arg(x),
                Value::I64(x) => b.arg(x),
                Value::I32(x) => b.arg(x),
                Value::F32(x) => b.arg(x),
            };
        }
        // SAFETY: `Launch::new`'s contract: the arguments match the kernel's parameters and
        // it stays within the memory they address.
        unsafe { b.launch(self.config) }.map_err(launch_err)?;
        Ok(())
    }

    fn emulate(&self, memory: &mut EmulatedMemory) {
        (self.host)(memory);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_of_a_kernel_its_module_does_not_define_is_refused() {
        let module = Module { name: "mine", kernels: &["a", "b"], source: "" };
        let host: HostFn = Arc::new(|_| {});
        let config = super::super::linear(4);
        // SAFETY: never issued.
        let err = unsafe { Launch::new(module, "c", Vec::new(), config, host.clone()) }.unwrap_err();
        assert!(err.contains("module `mine` defines no kernel `c`"), "{err}");
        // SAFETY: never issued.
        let launch = unsafe { Launch::new(module, "b", vec![Arg::I32(3)], config, host) }.unwrap();
        assert_eq!((launch.entry(), launch.args()), ("b", &[Arg::I32(3)][..]));
    }
}
