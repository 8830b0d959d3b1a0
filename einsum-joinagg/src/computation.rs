//! The computation: a DAG of abstract operators over tensors (Section 4.2).

use std::{collections::HashMap, fmt, sync::Arc};

use einsum_core::{DType, HostTensor, TensorDesc};
use petgraph::{Direction, graph::DiGraph, graph::NodeIndex, visit::EdgeRef};

use crate::{AbstractOperator, Error, IndexRole, JoinAggSpec, Result, Roles, execute_spec, execute_whole};

/// A vertex of the computation: a computation input or an operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u32);

/// One output of one vertex.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId {
    /// The producing vertex.
    pub op: OpId,
    /// Which of its outputs.
    pub output: usize,
}

impl fmt::Display for TensorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}.{}", self.op.0, self.output)
    }
}

/// A vertex: an input tensor of the computation, or an abstract operator and its inputs.
/// A clone shares the operator.
#[derive(Clone, Debug)]
pub enum Node {
    /// A tensor supplied from outside; it may be laid out in any tiling for free.
    Input {
        /// A readable name.
        name: String,
        /// Its type.
        desc: TensorDesc,
    },
    /// An abstract operator applied to earlier tensors.
    Op {
        /// A readable name, unique or not.
        name: String,
        /// The operator, shared by the computation's clones.
        op: Arc<dyn AbstractOperator>,
        /// The tensors feeding each input slot.
        inputs: Vec<TensorId>,
    },
}

impl Node {
    /// The vertex's name.
    pub fn name(&self) -> &str {
        match self {
            Node::Input { name, .. } | Node::Op { name, .. } => name,
        }
    }

    /// The types of the vertex's outputs.
    pub fn outputs(&self) -> &[TensorDesc] {
        match self {
            Node::Input { desc, .. } => std::slice::from_ref(desc),
            Node::Op { op, .. } => op.outputs(),
        }
    }
}

/// The DAG of abstract operators. Operators may have several outputs and a tensor several
/// consumers; `saved` tensors are the results that must remain after execution. The
/// [`Roles`] of its index names are declared by its operators as they are added and by the
/// builder ([`declare_role`](Self::declare_role)).
///
/// A clone is cheap: the operators are shared (`Arc`); only the DAG (names, input types,
/// edges), the saved list and the roles are copied. So a builder can hand out the
/// computation as it stands and keep growing its own.
#[derive(Clone, Debug, Default)]
pub struct Computation {
    graph: DiGraph<Node, (usize, usize)>,
    saved: Vec<TensorId>,
    /// The names given to saved tensors ([`Computation::save_as`]).
    output_names: Vec<(TensorId, String)>,
    roles: Roles,
}

impl Computation {
    /// An empty computation.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an input tensor.
    pub fn add_input(&mut self, name: impl Into<String>, desc: TensorDesc) -> TensorId {
        let id = self.graph.add_node(Node::Input { name: name.into(), desc });
        TensorId { op: OpId(id.index() as u32), output: 0 }
    }

    /// Adds an operator fed by `inputs`, which must match its input types in shape and
    /// dtype; returns its outputs.
    pub fn add_op(
        &mut self,
        name: impl Into<String>,
        op: Box<dyn AbstractOperator>,
        inputs: &[TensorId],
    ) -> Result<Vec<TensorId>> {
        self.add_shared_op(name, Arc::from(op), inputs)
    }

    /// [`Computation::add_op`] for an operator shared with another computation (a rewrite
    /// rebuilding a graph keeps the operators it does not change).
    pub fn add_shared_op(
        &mut self,
        name: impl Into<String>,
        op: Arc<dyn AbstractOperator>,
        inputs: &[TensorId],
    ) -> Result<Vec<TensorId>> {
        let name = name.into();
        if inputs.len() != op.inputs().len() {
            return Err(Error::Invalid {
                op: name,
                reason: format!("{} inputs given, the operator takes {}", inputs.len(), op.inputs().len()),
            });
        }
        for (k, (t, want)) in inputs.iter().zip(op.inputs()).enumerate() {
            let got = self.desc(*t)?;
            if got.shape() != want.shape() || got.dtype != want.dtype {
                return Err(Error::InputMismatch {
                    op: name,
                    input: k,
                    expected: want.to_string(),
                    got: got.to_string(),
                });
            }
            let indices = op.index_bound(k).is_some();
            if indices != (want.dtype == DType::I32) {
                let reason = if indices {
                    format!("input {k} holds indices, so it must be i32, not {}", want.dtype)
                } else {
                    format!("input {k} is i32 (indices); the operator computes on floating-point values")
                };
                return Err(Error::Invalid { op: name, reason });
            }
        }
        if let Some(d) = op.outputs().iter().find(|d| d.checked_size_bytes().is_none()) {
            return Err(Error::Invalid {
                op: name,
                reason: format!("output [{}] is too large to address", d.dims_string()),
            });
        }
        self.roles.declare_all(&op.index_roles(), &format!("operator `{name}`"))?;
        let outputs = op.outputs().len();
        let id = self.graph.add_node(Node::Op { name, op, inputs: inputs.to_vec() });
        for (slot, t) in inputs.iter().enumerate() {
            self.graph.add_edge(NodeIndex::new(t.op.0 as usize), id, (t.output, slot));
        }
        let op = OpId(id.index() as u32);
        Ok((0..outputs).map(|output| TensorId { op, output }).collect())
    }

    /// Declares that index `name` has `role` on every operator of the computation (those
    /// added before and after): the roles no operator can know, such as the FFN hidden
    /// index or the token index of a graph without attention. Declaring the same role again
    /// is harmless; a role other than the one the name already has (from the builder or
    /// from an operator) is an [`Error::RoleConflict`], and nothing changes.
    pub fn declare_role(&mut self, name: &str, role: IndexRole) -> Result<()> {
        self.roles.declare(name, role, "the graph's builder")
    }

    /// The roles of the computation's index names, declared so far.
    pub fn roles(&self) -> &Roles {
        &self.roles
    }

    /// Marks a tensor as a result of the computation.
    pub fn save(&mut self, t: TensorId) -> Result<()> {
        self.desc(t)?;
        if !self.saved.contains(&t) {
            self.saved.push(t);
        }
        Ok(())
    }

    /// Marks a tensor as a result of the computation under `name` (`logits`, say), the name
    /// reports, dumps and bindings give it ([`Computation::tensor_name`]). A name another
    /// input or named output has is [`Error::NameTaken`]; naming a tensor again renames it.
    pub fn save_as(&mut self, t: TensorId, name: impl Into<String>) -> Result<()> {
        let name = name.into();
        let input_named = self.inputs().iter().any(|&i| self.node(i.op).is_some_and(|n| n.name() == name));
        if name.is_empty() || input_named || self.output_names.iter().any(|(u, n)| *n == name && *u != t) {
            return Err(Error::NameTaken(name));
        }
        self.save(t)?;
        self.output_names.retain(|(u, _)| *u != t);
        self.output_names.push((t, name));
        Ok(())
    }

    /// How reports name tensor `t`: the name it was saved under, else its producing node's
    /// name (an input's name, or an operator's such as `matmul #3`), with the output's position
    /// when the node has several.
    pub fn tensor_name(&self, t: TensorId) -> String {
        if let Some((_, name)) = self.output_names.iter().find(|(u, _)| *u == t) {
            return name.clone();
        }
        match self.node(t.op) {
            Some(n) if n.outputs().len() > 1 => format!("{}[{}]", n.name(), t.output),
            Some(n) => n.name().to_string(),
            None => t.to_string(),
        }
    }

    /// The saved tensors, in the order they were saved.
    pub fn saved(&self) -> &[TensorId] {
        &self.saved
    }

    /// The vertex `id`, if it exists.
    pub fn node(&self, id: OpId) -> Option<&Node> {
        self.graph.node_weight(NodeIndex::new(id.0 as usize))
    }

    /// The type of tensor `t`.
    pub fn desc(&self, t: TensorId) -> Result<&TensorDesc> {
        self.node(t.op).and_then(|n| n.outputs().get(t.output)).ok_or_else(|| Error::UnknownTensor(t.to_string()))
    }

    /// Number of vertices (inputs and operators).
    pub fn len(&self) -> usize {
        self.graph.node_count()
    }

    /// True when the computation has no vertex.
    pub fn is_empty(&self) -> bool {
        self.graph.node_count() == 0
    }

    /// Every vertex id, in insertion order (which is a topological order, since operators
    /// can only consume tensors that already exist).
    pub fn topo_order(&self) -> Vec<OpId> {
        self.graph.node_indices().map(|n| OpId(n.index() as u32)).collect()
    }

    /// The operator vertices, in topological order.
    pub fn ops(&self) -> impl Iterator<Item = (OpId, &dyn AbstractOperator, &[TensorId])> {
        self.graph.node_indices().filter_map(|n| match &self.graph[n] {
            Node::Op { op, inputs, .. } => Some((OpId(n.index() as u32), op.as_ref(), inputs.as_slice())),
            Node::Input { .. } => None,
        })
    }

    /// The computation's input tensors, in insertion order.
    pub fn inputs(&self) -> Vec<TensorId> {
        self.graph
            .node_indices()
            .filter(|&n| matches!(self.graph[n], Node::Input { .. }))
            .map(|n| TensorId { op: OpId(n.index() as u32), output: 0 })
            .collect()
    }

    /// The `(operator, input slot)` pairs that consume tensor `t`.
    pub fn consumers(&self, t: TensorId) -> Vec<(OpId, usize)> {
        let mut out: Vec<(OpId, usize)> = self
            .graph
            .edges_directed(NodeIndex::new(t.op.0 as usize), Direction::Outgoing)
            .filter(|e| e.weight().0 == t.output)
            .map(|e| (OpId(e.target().index() as u32), e.weight().1))
            .collect();
        out.sort();
        out
    }

    /// Seeded random values for every computation input: floating-point values in `[-1, 1)`,
    /// and indices (i32) below the smallest bound their readers give
    /// ([`AbstractOperator::index_bound`]; 1, so all zeros, for an input nobody reads).
    pub fn random_inputs(&self, seed: u64) -> HashMap<TensorId, HostTensor> {
        let mut bounds: HashMap<TensorId, usize> = HashMap::new();
        for (_, op, inputs) in self.ops() {
            for (k, t) in inputs.iter().enumerate() {
                if let Some(b) = op.index_bound(k) {
                    bounds.entry(*t).and_modify(|x| *x = (*x).min(b)).or_insert(b);
                }
            }
        }
        self.inputs()
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let desc = self.desc(t).expect("inputs exist");
                let seed = seed.wrapping_add(i as u64);
                let value = match (bounds.get(&t), desc.dtype) {
                    (Some(&bound), _) => HostTensor::random_indices(desc.tensor_type(), bound, seed),
                    (None, DType::I32) => HostTensor::random_indices(desc.tensor_type(), 1, seed),
                    (None, dtype) => HostTensor::random(desc.tensor_type(), dtype, seed),
                };
                (t, value)
            })
            .collect()
    }

    /// Evaluates the computation on one device, each operator on whole tensors; returns the
    /// saved tensors.
    pub fn evaluate(&self, inputs: &HashMap<TensorId, HostTensor>) -> Result<HashMap<TensorId, HostTensor>> {
        self.run(inputs, |_, op, args| execute_whole(op, args))
    }

    /// Evaluates the computation with each operator decomposed by its spec in `specs`
    /// (Definition 3.7), or whole where it has none; returns the saved tensors.
    pub fn evaluate_with_specs(
        &self,
        inputs: &HashMap<TensorId, HostTensor>,
        specs: &HashMap<OpId, JoinAggSpec>,
    ) -> Result<HashMap<TensorId, HostTensor>> {
        self.run(inputs, |id, op, args| match specs.get(&id) {
            Some(spec) => execute_spec(op, spec, args),
            None => execute_whole(op, args),
        })
    }

    fn run(
        &self,
        inputs: &HashMap<TensorId, HostTensor>,
        exec: impl Fn(OpId, &dyn AbstractOperator, &[HostTensor]) -> Result<Vec<HostTensor>>,
    ) -> Result<HashMap<TensorId, HostTensor>> {
        let mut values: HashMap<TensorId, HostTensor> = HashMap::new();
        for n in self.graph.node_indices() {
            let id = OpId(n.index() as u32);
            match &self.graph[n] {
                Node::Input { name, desc } => {
                    let t = TensorId { op: id, output: 0 };
                    let v = inputs.get(&t).ok_or_else(|| Error::MissingInput(name.clone()))?;
                    if *v.ty() != desc.tensor_type() || v.dtype() != desc.dtype {
                        return Err(Error::InputMismatch {
                            op: name.clone(),
                            input: 0,
                            expected: desc.to_string(),
                            got: format!("{} {}", v.ty(), v.dtype()),
                        });
                    }
                    values.insert(t, v.clone());
                }
                Node::Op { op, inputs: args, .. } => {
                    let args: Vec<HostTensor> = args.iter().map(|t| values[t].clone()).collect();
                    for (output, v) in exec(id, op.as_ref(), &args)?.into_iter().enumerate() {
                        values.insert(TensorId { op: id, output }, v);
                    }
                }
            }
        }
        Ok(self.saved.iter().map(|t| (*t, values[t].clone())).collect())
    }
}
