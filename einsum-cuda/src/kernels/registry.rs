//! The CUDA kernels by operator type, as a value ([`KernelRegistry`]): from the concrete type
//! of each operator (its `TypeId`) to its lowering ([`CudaKernel`]).
//!
//! [`KernelRegistry::default`] holds the library's: one [`CudaKernel`] impl per `einsum-ops`
//! operator (in [`crate::kernels::operators`]) and the operators the fusion pass makes
//! ([`crate::kernels::fused`], [`FusedKernel`]s). An operator defined in another crate gets
//! a GPU kernel the same way: it implements [`CudaKernel`], typically lowering to a
//! [`crate::work::Launch`] of its own CUDA C source, and is added with
//! [`KernelRegistry::with`] to the registry in [`crate::CudaOptions::kernels`]. An operator
//! with no entry is refused before any device is touched: at compile time by
//! `CudaBackend::check_operator`, and at prepare time by [`crate::lower::lower`], both with an
//! error naming the operator and its kind.
//!
//! # Design
//! The kernel library hands the backend each kernel's operator as an `&dyn Any`
//! ([`einsum_core::OperatorRef`]), so the lookup is by `TypeId` and the entry downcasts to
//! the one type it was registered for: no chain of downcasts, and no match over kinds
//! that could miss one at run time.

use std::any::{Any, TypeId};
use std::fmt;

use einsum_core::{DType, TensorType};
use einsum_joinagg::AbstractOperator;
use einsum_ops::attention::Attention;
use einsum_ops::binary::Binary;
use einsum_ops::einsum::Einsum;
use einsum_ops::epilogue::Epilogue;
use einsum_ops::layernorm::LayerNorm;
use einsum_ops::reduce::Reduce;
use einsum_ops::rmsnorm::RmsNorm;
use einsum_ops::rope::Rope;
use einsum_ops::softmax::Softmax;
use einsum_ops::unary::Unary;

use crate::kernels::fused::{BinaryRmsNorm, UnaryBinary};
use crate::lower::{KernelCtx, Ptr};
use crate::work::Op;

/// The buffers of one kernel task, before the operator's own data type is known.
#[derive(Clone, Copy, Debug)]
pub struct KernelArgs<'a> {
    /// The input blocks (the function spec's), in absolute coordinates.
    pub inputs: &'a [TensorType],
    /// The output blocks.
    pub outputs: &'a [TensorType],
    /// Where each input block is.
    pub ins: &'a [Ptr],
    /// Where each output block goes.
    pub outs: &'a [Ptr],
}

/// One call of an operator's kernel, as a [`CudaKernel`] lowers it: [`KernelArgs`], with
/// at least one output and as many pointers as blocks, and the element type.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    /// The element type of the operator's output (and, for every kernel here, its inputs).
    pub dtype: DType,
    /// The input blocks.
    pub inputs: &'a [TensorType],
    /// The first output block.
    pub y: &'a TensorType,
    /// Where each input block is.
    pub ins: &'a [Ptr],
    /// Where each output block goes.
    pub outs: &'a [Ptr],
}

/// The CUDA lowering of one concrete operator type: a call on its blocks becomes device
/// operations ([`Op`]s), or an error saying why this call cannot run on the GPU.
pub trait CudaKernel: AbstractOperator + Sized {
    /// Lowers `call`; may add scratch areas and constant tables through `ctx`.
    fn lower(&self, call: &Call<'_>, ctx: &mut KernelCtx<'_>) -> Result<Vec<Op>, String>;
}

/// The CUDA lowering of an operator the backend makes itself (the fusion pass's,
/// [`crate::kernels::fused`]): such an operator is no `einsum-ops` operator (it has no
/// function specs of its own), so it lowers straight from the kernel task's blocks.
pub trait FusedKernel: Any {
    /// Lowers one call on `args`' blocks; may add scratch areas and constant tables through
    /// `ctx`.
    fn lower(&self, args: &KernelArgs<'_>, ctx: &mut KernelCtx<'_>) -> Result<Vec<Op>, String>;
}

/// A type-erased lowering: downcasts the operator and lowers the call.
type LowerFn = fn(&dyn Any, &KernelArgs<'_>, &mut KernelCtx<'_>) -> Result<Vec<Op>, String>;

/// One entry of the table: an operator type and its lowering.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    type_id: TypeId,
    /// The operator's Rust type, for messages and listings.
    pub type_name: &'static str,
    lower: LowerFn,
}

impl Entry {
    /// The entry of operator type `T`.
    fn of<T: CudaKernel>() -> Entry {
        Entry { type_id: TypeId::of::<T>(), type_name: std::any::type_name::<T>(), lower: lower_as::<T> }
    }

    /// The entry of fused operator type `T`.
    fn fused<T: FusedKernel>() -> Entry {
        Entry { type_id: TypeId::of::<T>(), type_name: std::any::type_name::<T>(), lower: lower_fused::<T> }
    }

    /// Lowers one call of `operator` (which must be of this entry's type, as
    /// [`KernelRegistry::find`] guarantees).
    pub fn lower(&self, operator: &dyn Any, args: &KernelArgs<'_>, ctx: &mut KernelCtx<'_>) -> Result<Vec<Op>, String> {
        (self.lower)(operator, args, ctx)
    }
}

/// `operator` as the type its table entry was made for.
fn downcast<T: 'static>(operator: &dyn Any) -> Result<&T, String> {
    operator
        .downcast_ref::<T>()
        .ok_or_else(|| format!("the kernel table's entry for {} got another type", std::any::type_name::<T>()))
}

fn lower_as<T: CudaKernel>(
    operator: &dyn Any,
    args: &KernelArgs<'_>,
    ctx: &mut KernelCtx<'_>,
) -> Result<Vec<Op>, String> {
    let op = downcast::<T>(operator)?;
    if args.ins.len() != args.inputs.len() || args.outs.len() != args.outputs.len() {
        return Err("the kernel task's buffers do not match the function spec".into());
    }
    let (Some(y), Some(out)) = (args.outputs.first(), op.outputs().first()) else {
        return Err("the operator has no output".into());
    };
    let call = Call { dtype: out.dtype, inputs: args.inputs, y, ins: args.ins, outs: args.outs };
    op.lower(&call, ctx)
}

fn lower_fused<T: FusedKernel>(
    operator: &dyn Any,
    args: &KernelArgs<'_>,
    ctx: &mut KernelCtx<'_>,
) -> Result<Vec<Op>, String> {
    downcast::<T>(operator)?.lower(args, ctx)
}

/// The CUDA kernels by operator type; see the module docs.
#[derive(Clone)]
pub struct KernelRegistry {
    entries: Vec<Entry>,
}

impl Default for KernelRegistry {
    /// The library's kernels: every `einsum-ops` operator the backend runs and the fusion
    /// pass's operators.
    fn default() -> Self {
        KernelRegistry {
            entries: vec![
                Entry::of::<Einsum>(),
                Entry::of::<Epilogue>(),
                Entry::of::<Unary>(),
                Entry::of::<Binary>(),
                Entry::of::<Softmax>(),
                Entry::of::<RmsNorm>(),
                Entry::of::<LayerNorm>(),
                Entry::of::<Rope>(),
                Entry::of::<Reduce>(),
                Entry::of::<Attention>(),
                Entry::fused::<UnaryBinary>(),
                Entry::fused::<BinaryRmsNorm>(),
            ],
        }
    }
}

impl KernelRegistry {
    /// This registry with operator type `T`'s kernel, in place of any it had.
    pub fn with<T: CudaKernel>(mut self) -> Self {
        self.entries.retain(|e| e.type_id != TypeId::of::<T>());
        self.entries.push(Entry::of::<T>());
        self
    }

    /// Every entry, in registration order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entry for `operator`'s concrete type, if there is a kernel for it.
    pub fn find(&self, operator: &dyn Any) -> Option<&Entry> {
        // `<dyn Any>::type_id` goes through the vtable: the concrete type's id.
        let id = Any::type_id(operator);
        self.entries.iter().find(|e| e.type_id == id)
    }
}

impl PartialEq for KernelRegistry {
    /// The same operator types in the same order (each type has one lowering).
    fn eq(&self, other: &Self) -> bool {
        self.entries.iter().map(|e| e.type_id).eq(other.entries.iter().map(|e| e.type_id))
    }
}

impl Eq for KernelRegistry {}

impl fmt::Debug for KernelRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.entries.iter().map(|e| e.type_name)).finish()
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::{HostTensor, Interval, KernelClass, TensorDesc};
    use einsum_joinagg::{FunctionSpec, JoinAggSpec, ShardableIndex};
    use einsum_ops::unary::UnaryOp;

    use super::*;

    #[test]
    fn every_entry_is_a_distinct_operator_type() {
        let registry = KernelRegistry::default();
        let t = registry.entries();
        for (i, a) in t.iter().enumerate() {
            assert!(t[i + 1..].iter().all(|b| b.type_id != a.type_id), "{} is listed twice", a.type_name);
        }
        assert_eq!(t.len(), 12);
    }

    #[test]
    fn an_operator_is_found_by_its_concrete_type() {
        let x = TensorDesc::of(&[("n", 4)], DType::F32).unwrap();
        let op: Box<dyn AbstractOperator> = Box::new(Unary::new(&x, UnaryOp::Relu).unwrap());
        let any: &dyn Any = op.as_ref();
        let registry = KernelRegistry::default();
        assert!(registry.find(any).unwrap().type_name.ends_with("Unary"));
        // The box itself is another type: the lookup must see through to the operator.
        assert!(registry.find(&op).is_none());
        assert!(registry.find(&Outsider).is_none());
    }

    #[test]
    fn a_registered_operator_is_found_and_registering_it_again_replaces_it() {
        let registry = KernelRegistry::default().with::<Outsider>();
        assert!(registry.find(&Outsider).unwrap().type_name.ends_with("Outsider"));
        assert_eq!(registry.entries().len(), KernelRegistry::default().entries().len() + 1);
        assert_eq!(registry.clone().with::<Outsider>(), registry);
        assert_ne!(registry, KernelRegistry::default());
    }

    impl CudaKernel for Outsider {
        fn lower(&self, _: &Call<'_>, _: &mut KernelCtx<'_>) -> Result<Vec<Op>, String> {
            Ok(Vec::new())
        }
    }

    /// An operator defined outside `einsum-ops`.
    #[derive(Debug)]
    struct Outsider;

    impl AbstractOperator for Outsider {
        fn kind(&self) -> &str {
            "outsider"
        }
        fn kernel_class(&self) -> KernelClass {
            KernelClass::Elementwise
        }
        fn inputs(&self) -> &[TensorDesc] {
            &[]
        }
        fn outputs(&self) -> &[TensorDesc] {
            &[]
        }
        fn shardable(&self) -> Vec<ShardableIndex> {
            Vec::new()
        }
        fn join_agg_spec(&self, _: &[Vec<Interval>]) -> einsum_joinagg::Result<JoinAggSpec> {
            Ok(JoinAggSpec { functions: Vec::new() })
        }
        fn flops(&self, _: &FunctionSpec) -> f64 {
            0.0
        }
        fn compute(&self, _: &FunctionSpec, _: &[HostTensor]) -> einsum_joinagg::Result<Vec<HostTensor>> {
            Ok(Vec::new())
        }
    }
}
