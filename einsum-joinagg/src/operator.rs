//! The [`AbstractOperator`] trait: what an operator author implements.

use std::fmt;

use einsum_core::{Aggregation, HostTensor, Interval, KernelClass, TensorDesc};

use crate::{FunctionSpec, IndexRole, JoinAggSpec, OpRole, Result, ShardableIndex};

/// An abstract operator (Definition 3.3) together with the ways it can be decomposed
/// (join-agg specs, Definition 3.6) and its concrete operator `f` as a CPU reference kernel.
///
/// # Design
/// The operator, not the system, builds its join-agg specs: only it knows that sharding
/// `heads_kv` shards `heads_q` in groups, or that a packed `sequence` may be cut only at
/// sequence ends. The optimizer sees nothing but the shardable indices, the specs they
/// yield, and the work of each function spec. Every method is cheap except `compute`.
/// `Any` is a supertrait so that a backend with its own kernels (CUDA) can recover the
/// concrete operator type behind a `&dyn AbstractOperator` by downcasting. `Debug` must
/// print every parameter the specs and costs depend on (derive it): the logical optimizer
/// enumerates and prices once the operators of one type that print alike (the repeated
/// layers of a model). Roles ([`index_roles`](Self::index_roles),
/// [`op_role`](Self::op_role)) are how an operator tells structure-following strategies
/// what its indices are, so that none of them reads index names or kinds.
pub trait AbstractOperator: std::any::Any + fmt::Debug + Send + Sync {
    /// The operator's kind, e.g. `matmul`, `attention`.
    fn kind(&self) -> &str;

    /// Which roofline the operator's kernels run at: the time model prices a call on `f`
    /// from [`flops`](Self::flops), [`bytes`](Self::bytes) and this class, and knows no
    /// operator names.
    fn kernel_class(&self) -> KernelClass;

    /// The zero-bounded input types, with named indices.
    fn inputs(&self) -> &[TensorDesc];

    /// The zero-bounded output types, with named indices.
    fn outputs(&self) -> &[TensorDesc];

    /// The ⊕ that combines partial outputs sharing an output box.
    fn aggregation(&self) -> Aggregation {
        Aggregation::Sum
    }

    /// The indices a spec request may split, in the order `join_agg_spec` takes them.
    fn shardable(&self) -> Vec<ShardableIndex>;

    /// The join-agg spec for one decomposition: `intervals[s]` splits the `s`th shardable
    /// index. The spec has one function spec per combination of intervals, the first
    /// shardable index varying slowest.
    ///
    /// Returns [`Error::Unsupported`](crate::Error::Unsupported) for a combination the
    /// operator does not offer, and other errors for malformed intervals.
    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec>;

    /// Floating-point operations of one call of the concrete operator on `f`.
    fn flops(&self, f: &FunctionSpec) -> f64;

    /// Bytes one call on `f` reads and writes (its input and output blocks).
    fn bytes(&self, f: &FunctionSpec) -> f64 {
        let io = |types: &[einsum_core::TensorType], descs: &[TensorDesc]| -> usize {
            types.iter().zip(descs).map(|(t, d)| t.volume() * d.dtype.size_bytes()).sum()
        };
        (io(&f.inputs, self.inputs()) + io(&f.outputs, self.outputs())) as f64
    }

    /// The roles of this operator's own indices that it knows from its definition, as
    /// `(index name, role)` pairs: attention knows its sequence, query-block and head
    /// indices. A role applies to its index name across the whole graph (see
    /// [`Roles`](crate::Roles)); roles no operator can know are declared by the graph's
    /// builder ([`Computation::declare_role`](crate::Computation::declare_role)). Default:
    /// none, which is right for every operator that is not part of a model's structure.
    fn index_roles(&self) -> Vec<(String, IndexRole)> {
        Vec::new()
    }

    /// What the operator is in a model's structure, for strategies defined around it
    /// (Ulysses and Megatron split [`OpRole::Attention`] by heads). Default: `None`.
    fn op_role(&self) -> Option<OpRole> {
        None
    }

    /// The concrete operator `f[F]`: computes the output blocks of `f` from its input
    /// blocks (each a tensor whose type is the matching input box of `f`, in absolute
    /// coordinates). Computes in f32 and stores in the outputs' dtypes.
    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>>;
}
