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
///
/// # Example
/// `y = 2·x` on a matrix: both indices may be split anywhere, every tensor's dimension `d`
/// follows shardable index `d` ([`grid_spec`](crate::grid_spec) builds the function
/// specs), and the CPU kernel doubles its block. Every spec for 4 devices then computes
/// the reference result (Definition 3.7). `examples/custom_operator.rs` takes a fused
/// SwiGLU the whole way through `Graph::op`, `compile` and a run.
///
/// ```
/// use einsum_core::{DType, HostTensor, Interval, KernelClass, TensorDesc};
/// use einsum_joinagg::{
///     AbstractOperator, FunctionSpec, JoinAggSpec, Result, ShardableIndex, decomposition_error,
///     enumerate_specs, grid_spec,
/// };
///
/// #[derive(Debug)]
/// struct Double {
///     io: Vec<TensorDesc>,
/// }
///
/// impl AbstractOperator for Double {
///     fn kind(&self) -> &str {
///         "double"
///     }
///     fn kernel_class(&self) -> KernelClass {
///         KernelClass::Elementwise
///     }
///     fn inputs(&self) -> &[TensorDesc] {
///         &self.io
///     }
///     fn outputs(&self) -> &[TensorDesc] {
///         &self.io
///     }
///     fn shardable(&self) -> Vec<ShardableIndex> {
///         self.io[0].dims.iter().map(|d| ShardableIndex::any(d.name.clone(), d.extent)).collect()
///     }
///     fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
///         let dims = vec![vec![Some(0), Some(1)]; 2];
///         grid_spec("double", &self.io, &self.io, &self.shardable(), &dims, intervals)
///     }
///     fn flops(&self, f: &FunctionSpec) -> f64 {
///         f.outputs[0].volume() as f64
///     }
///     fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
///         let data = inputs[0].to_f32().iter().map(|x| 2.0 * x).collect();
///         Ok(vec![HostTensor::from_f32(f.outputs[0].clone(), self.io[0].dtype, data)?])
///     }
/// }
///
/// let op = Double { io: vec![TensorDesc::of(&[("rows", 8), ("cols", 6)], DType::F32)?] };
/// let specs = enumerate_specs(&op, 4)?;
/// assert!(!specs.is_empty());
/// for choice in &specs {
///     assert!(decomposition_error(&op, &choice.spec, 1)? < 1e-6);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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

    /// The ⊕ that combines partial outputs sharing an output box. With a row-wise one
    /// ([`Aggregation::Softmax`]), `compute` returns for a box shared by several function
    /// specs of the spec the widened partial ([`crate::partial_types`]): the box one
    /// column wider along its last index, the statistics column last. The function spec's
    /// output box itself stays in output coordinates.
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

    /// The bound of input `input`'s values when it holds indices (dtype i32; token ids below
    /// a vocabulary's size, say): `Some(bound)` for such an input, `None` (the default) for
    /// floating-point values. Adding an operator to a computation refuses an i32 input the
    /// operator gives no bound for, so no operator computes on indices as if they were
    /// values; random inputs draw indices below the bound.
    fn index_bound(&self, input: usize) -> Option<usize> {
        let _ = input;
        None
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
