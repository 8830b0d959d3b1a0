//! The kernel library of a compiled computation: kernel `k` runs the concrete operator of
//! `kernels[k]`'s operator on its function spec.

use einsum_core::{Backend, BackendError, DType, HostTensor, KernelInfo, KernelLibrary, OperatorRef, TensorType};
use einsum_joinagg::{AbstractOperator, Computation, Node};

use super::KernelCall;

/// Runs a compiled graph's `Kernel` tasks with the operators' CPU reference kernels
/// ([`einsum_joinagg::AbstractOperator::compute`]); kernel indices are indices into the
/// kernel table of [`super::Compiled::kernels`].
#[derive(Clone, Copy, Debug)]
pub struct ComputationKernels<'a>(pub &'a Computation, pub &'a [KernelCall]);

impl KernelLibrary for ComputationKernels<'_> {
    fn run(
        &self,
        kernel: usize,
        inputs: &[HostTensor],
        outputs: &[(TensorType, DType)],
    ) -> Result<Vec<HostTensor>, String> {
        let call = self.1.get(kernel).ok_or_else(|| format!("no kernel {kernel} in a table of {}", self.1.len()))?;
        let name = self.name(kernel);
        let Some(Node::Op { op, .. }) = self.0.node(call.op) else {
            return Err(format!("{name}: vertex {} is not an operator", call.op.0));
        };
        if inputs.len() != call.function.inputs.len() {
            return Err(format!(
                "{name}: {} inputs given, the function spec has {}",
                inputs.len(),
                call.function.inputs.len()
            ));
        }
        for (k, (t, want)) in inputs.iter().zip(&call.function.inputs).enumerate() {
            if t.ty() != want {
                return Err(format!("{name}: input {k} is {}, the function spec reads {want}", t.ty()));
            }
        }
        let got = op.compute(&call.function, inputs).map_err(|e| format!("{name}: {e}"))?;
        if got.len() != outputs.len() {
            return Err(format!("{name}: returned {} outputs, expected {}", got.len(), outputs.len()));
        }
        for (j, (g, (ty, dtype))) in got.iter().zip(outputs).enumerate() {
            if g.ty() != ty || g.dtype() != *dtype {
                return Err(format!("{name}: output {j} is {} {}, expected {ty} {dtype}", g.ty(), g.dtype()));
            }
        }
        Ok(got)
    }

    fn name(&self, kernel: usize) -> String {
        match self.1.get(kernel) {
            Some(call) => {
                let op = self.0.node(call.op).map_or("?", |n| n.name());
                format!("operator `{op}` (vertex {}) on {:?}", call.op.0, call.function.inputs)
            }
            None => format!("kernel {kernel}"),
        }
    }

    fn info(&self, kernel: usize) -> Option<KernelInfo<'_>> {
        self.kernel_info(kernel)
    }
}

impl<'a> ComputationKernels<'a> {
    /// The operator of `kernels[kernel]` (its concrete value, name and kind) and its
    /// function spec's blocks, borrowed from the computation and the table
    /// ([`KernelLibrary::info`]).
    pub fn kernel_info(&self, kernel: usize) -> Option<KernelInfo<'a>> {
        let call = self.1.get(kernel)?;
        let Some(Node::Op { op, name, .. }) = self.0.node(call.op) else { return None };
        Some(KernelInfo {
            operator: operator_ref(op.as_ref(), name),
            inputs: &call.function.inputs,
            outputs: &call.function.outputs,
        })
    }
}

/// Operator `op`, the vertex called `name`, as a backend sees it.
pub fn operator_ref<'a>(op: &'a dyn AbstractOperator, name: &'a str) -> OperatorRef<'a> {
    OperatorRef { value: op, name, kind: op.kind() }
}

/// Asks `backend` about every operator of `comp`, in topological order: the first it has
/// no kernel for is refused ([`BackendError::Unsupported`], naming the operator). Needs no
/// device, so a driver calls it before planning.
pub fn check_operators(backend: &dyn Backend, comp: &Computation) -> Result<(), BackendError> {
    for (id, op, _) in comp.ops() {
        let name = comp.node(id).map_or("?", |n| n.name());
        backend.check_operator(operator_ref(op, name))?;
    }
    Ok(())
}
