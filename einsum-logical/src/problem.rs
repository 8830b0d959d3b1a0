//! The optimization problem every strategy solves, built once from a computation.

use std::any::{Any, TypeId};
use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use einsum_core::{FastMap, TensorType};
use einsum_joinagg::{
    AbstractOperator, Computation, IndexRole, JoinAggSpec, Node, OpId, OpRole, enumerate_specs, factorizations,
};

use crate::{CostModel, Error, LogicalPlan, OpCost, PlannedOp, Result, SpecCost};

/// The repartition costs of one input between pairs of tilings `(from, to)`, `from != to`.
pub type RepartitionPairs = FastMap<(TilingId, TilingId), f64>;

/// An interned set of blocks of one tensor: a producer's output tiling, or the distinct
/// blocks a consumer's spec needs. Two ids are equal exactly when the block sets are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TilingId(pub u32);

/// Where an operator input comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// A computation input: free, in any tiling (it is loaded in the layout a spec reads;
    /// the [`Time`](crate::Time) model therefore charges no join for it). Its blocks stay
    /// resident on the devices that read them (see [`Candidate::resident_bytes`]).
    Input {
        /// The computation input (an index into [`Problem::inputs`]).
        input: usize,
    },
    /// Output `output` of operator `op` (an index into [`Problem::ops`]).
    Op {
        /// The producing operator's index.
        op: usize,
        /// Which of its outputs.
        output: usize,
    },
}

/// One spec an operator may run.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// Interval count per shardable index.
    pub counts: Vec<usize>,
    /// Other interval counts that request exactly this spec. Enumeration keeps one
    /// candidate per distinct spec (the first request that produced it), so a strategy
    /// that looks for a spec by its counts (the baselines) must also look here: e.g.
    /// attention split into `query=4` blocks that coincide with four packed sequences is
    /// the same spec as `tokens=4`.
    pub aliases: Vec<Vec<usize>>,
    /// The spec.
    pub spec: JoinAggSpec,
    /// The tiling of each output (`out(J)`).
    pub outputs: Vec<TilingId>,
    /// The blocks each input needs (`in_k(J)`).
    pub inputs: Vec<TilingId>,
    /// The spec's tiling-independent cost.
    pub cost: SpecCost,
    /// Bytes of the join and aggregation sub-costs (the proxy's volume, in bytes).
    pub bytes: f64,
    /// The most bytes of computation-input blocks that one of its function specs reads: per
    /// function spec, the bytes of its block of every input that is a computation input
    /// ([`Source::Input`]), summed; the largest such sum. The function specs are placed on
    /// the `p` devices as a bijection chosen later, so this is what the operator keeps
    /// resident on its busiest device (see [`Problem::resident_bytes`]).
    pub resident_bytes: f64,
}

/// A computation input, kept resident on the devices that read it for the executable's
/// lifetime.
#[derive(Clone, Debug, PartialEq)]
pub struct ResidentInput {
    /// Its node name.
    pub name: String,
    /// Its size, whole.
    pub bytes: f64,
}

/// One operator of the problem.
#[derive(Clone, Debug)]
pub struct OpProblem {
    /// The operator's id in the computation.
    pub id: OpId,
    /// Its node name.
    pub name: String,
    /// Its kind (for people: strategies read [`op_role`](Self::op_role) instead).
    pub kind: String,
    /// What the operator declares it is in the model's structure
    /// ([`AbstractOperator::op_role`]), e.g. attention.
    pub op_role: Option<OpRole>,
    /// The names of its shardable indices.
    pub shardable: Vec<String>,
    /// The role of each shardable index: the one the computation's [`Roles`] give its name
    /// (declared by an operator or by the graph's builder), if any.
    ///
    /// [`Roles`]: einsum_joinagg::Roles
    pub roles: Vec<Option<IndexRole>>,
    /// The most intervals each shardable index can be split into (its extent, or one more
    /// than its allowed cut positions, e.g. the number of packed sequences).
    pub max_parts: Vec<usize>,
    /// The dimension names of each output, outermost first (so rules can name "the row
    /// index of the output").
    pub output_dims: Vec<Vec<String>>,
    /// Where each input comes from.
    pub sources: Vec<Source>,
    /// The cost of repartitioning each input, in the model's unit.
    pub repartition: Vec<f64>,
    /// Per input produced by an operator, the cost of repartitioning it between each pair
    /// of distinct tilings: the producer's output tilings and the blocks this operator's
    /// candidates need ([`CostModel::repartition_between`]); `None` for a computation
    /// input. A pair it lacks costs [`repartition`](Self::repartition) (see
    /// [`repartition_cost`](Self::repartition_cost)).
    pub repartition_pairs: Vec<Option<Arc<RepartitionPairs>>>,
    /// The bytes of each input tensor (what a repartition moves).
    pub input_bytes: Vec<f64>,
    /// The consumers `(op index, input slot)` of each output.
    pub consumers: Vec<Vec<(usize, usize)>>,
    /// Every spec it offers on `p` devices.
    pub candidates: Arc<[Candidate]>,
}

/// A computation prepared for optimizers: operators in topological order, each with its
/// candidate specs, their costs, and interned tilings.
#[derive(Clone, Debug)]
pub struct Problem {
    /// The device count.
    pub p: usize,
    /// The operators, in topological order (producers before consumers).
    pub ops: Vec<OpProblem>,
    /// The cost model's name.
    pub cost_model: String,
    /// The unit of every cost.
    pub unit: &'static str,
    /// Every computation input, in `Computation::inputs` order.
    pub inputs: Vec<ResidentInput>,
    /// Bytes per device available for resident computation inputs; `None`: unlimited (see
    /// [`with_memory_budget`](Self::with_memory_budget)).
    pub memory_budget: Option<f64>,
}

impl Problem {
    /// Enumerates and prices every operator's specs on `p` devices.
    ///
    /// Operators that enumeration and pricing cannot tell apart (the repeated layers of a
    /// transformer stack) are enumerated and priced once and share the result: two operators
    /// count as equal when they have the same concrete type, the same `Debug` rendering (so
    /// an operator's `Debug` must print every parameter its specs depend on, as a derived
    /// one does) and the same inputs coming from computation inputs, and the problem is then
    /// the same as [`new_unshared`](Self::new_unshared)'s (the argument is in the source, on
    /// `SharingKey`; a cost model is told no more of an input's [`Source`] than whether it
    /// is resident, see [`CostModel::spec`]).
    pub fn new(comp: &Computation, p: usize, cost: &dyn CostModel) -> Result<Problem> {
        Self::build(comp, p, cost, true)
    }

    /// Like [`new`](Self::new), but enumerates and prices every operator on its own, however
    /// many equal operators the computation holds: the reference `new` is checked against.
    pub fn new_unshared(comp: &Computation, p: usize, cost: &dyn CostModel) -> Result<Problem> {
        Self::build(comp, p, cost, false)
    }

    fn build(comp: &Computation, p: usize, cost: &dyn CostModel, share: bool) -> Result<Problem> {
        if p == 0 {
            return Err(Error::NoDevices(p));
        }
        let mut interner = Interner::default();
        let mut shared: HashMap<SharingKey, Arc<[Candidate]>> = HashMap::new();
        let index: HashMap<OpId, usize> = comp.ops().enumerate().map(|(i, (id, _, _))| (id, i)).collect();
        let input_ids = comp.inputs();
        let input_index: HashMap<OpId, usize> = input_ids.iter().enumerate().map(|(i, t)| (t.op, i)).collect();
        let inputs: Vec<ResidentInput> = input_ids
            .iter()
            .map(|&t| {
                Ok(ResidentInput {
                    name: comp.node(t.op).map_or_else(String::new, |n| n.name().to_string()),
                    bytes: comp.desc(t)?.size_bytes() as f64,
                })
            })
            .collect::<Result<_>>()?;
        let mut ops = Vec::with_capacity(index.len());
        let mut input_descs = Vec::with_capacity(index.len());
        for (id, op, args) in comp.ops() {
            input_descs.push(op.inputs().to_vec());
            let sources: Vec<Source> = args
                .iter()
                .map(|t| match comp.node(t.op) {
                    Some(Node::Op { .. }) => Source::Op { op: index[&t.op], output: t.output },
                    _ => Source::Input { input: input_index[&t.op] },
                })
                .collect();
            let resident: Vec<bool> = sources.iter().map(|s| matches!(s, Source::Input { .. })).collect();
            let candidates = if share {
                match shared.entry(SharingKey::of(op, &resident)) {
                    Entry::Occupied(seen) => seen.get().clone(),
                    Entry::Vacant(slot) => {
                        slot.insert(candidates(op, p, cost, &resident, &mut interner)?.into()).clone()
                    }
                }
            } else {
                candidates(op, p, cost, &resident, &mut interner)?.into()
            };
            let shardable = op.shardable();
            ops.push(OpProblem {
                id,
                name: comp.node(id).map_or_else(String::new, |n| n.name().to_string()),
                kind: op.kind().to_string(),
                op_role: op.op_role(),
                roles: shardable.iter().map(|s| comp.roles().get(&s.name)).collect(),
                max_parts: shardable.iter().map(|s| s.max_parts()).collect(),
                shardable: shardable.into_iter().map(|s| s.name).collect(),
                output_dims: op.outputs().iter().map(|d| d.dims.iter().map(|x| x.name.clone()).collect()).collect(),
                sources,
                repartition: op.inputs().iter().map(|d| cost.repartition(d, p)).collect(),
                repartition_pairs: Vec::new(),
                input_bytes: op.inputs().iter().map(|d| d.size_bytes() as f64).collect(),
                consumers: vec![Vec::new(); op.outputs().len()],
                candidates,
            });
        }
        for c in 0..ops.len() {
            for k in 0..ops[c].sources.len() {
                if let Source::Op { op, output } = ops[c].sources[k] {
                    ops[op].consumers[output].push((c, k));
                }
            }
        }
        price_repartition_pairs(&mut ops, &input_descs, &interner, p, cost);
        tracing::debug!(
            ops = ops.len(),
            candidates = ops.iter().map(|o| o.candidates.len()).sum::<usize>(),
            cost_model = cost.name(),
            "enumerated and priced the candidate specs"
        );
        Ok(Problem { p, ops, cost_model: cost.name().to_string(), unit: cost.unit(), inputs, memory_budget: None })
    }

    /// True when input `k` of operator `c`, running candidate `choice[c]`, must be
    /// repartitioned: its producer's tiling differs from the blocks the candidate needs.
    pub fn needs_repartition(&self, choice: &[usize], c: usize, k: usize) -> bool {
        match self.ops[c].sources[k] {
            Source::Input { .. } => false,
            Source::Op { op, output } => {
                self.ops[op].candidates[choice[op]].outputs[output] != self.ops[c].candidates[choice[c]].inputs[k]
            }
        }
    }

    /// The cost of repartitioning input `k` of operator `c` under a full assignment: zero
    /// when its producer's tiling is what the candidate needs (or it is a computation input).
    pub fn edge_repartition(&self, choice: &[usize], c: usize, k: usize) -> f64 {
        match self.ops[c].sources[k] {
            Source::Input { .. } => 0.0,
            Source::Op { op, output } => self.ops[c].repartition_cost(
                k,
                self.ops[op].candidates[choice[op]].outputs[output],
                self.ops[c].candidates[choice[c]].inputs[k],
            ),
        }
    }

    /// The cost of every operator under a full assignment of candidates.
    pub fn evaluate(&self, choice: &[usize]) -> Result<Vec<OpCost>> {
        self.check(choice)?;
        Ok((0..self.ops.len())
            .map(|c| {
                let op = &self.ops[c];
                let cand = &op.candidates[choice[c]];
                let moved: Vec<usize> =
                    (0..op.sources.len()).filter(|&k| self.needs_repartition(choice, c, k)).collect();
                OpCost {
                    repartition: moved.iter().fold(0.0, |acc, &k| acc + self.edge_repartition(choice, c, k)),
                    join: cand.cost.join,
                    aggregation: cand.cost.aggregation,
                    compute: cand.cost.compute,
                    bytes: cand.bytes + moved.iter().map(|&k| op.input_bytes[k]).sum::<f64>(),
                }
            })
            .collect())
    }

    /// The total cost of a full assignment.
    pub fn total(&self, choice: &[usize]) -> Result<f64> {
        Ok(self.evaluate(choice)?.iter().map(OpCost::total).sum())
    }

    /// The plan for a full assignment, labelled with the optimizer that chose it.
    pub fn plan(&self, choice: &[usize], optimizer: &str) -> Result<LogicalPlan> {
        let costs = self.evaluate(choice)?;
        let ops: Vec<PlannedOp> = self
            .ops
            .iter()
            .zip(choice)
            .zip(costs)
            .map(|((op, &n), cost)| {
                let cand = &op.candidates[n];
                PlannedOp {
                    id: op.id,
                    name: op.name.clone(),
                    kind: op.kind.clone(),
                    splits: op.shardable.iter().cloned().zip(cand.counts.iter().copied()).collect(),
                    candidate: n,
                    spec: cand.spec.clone(),
                    cost,
                }
            })
            .collect();
        Ok(LogicalPlan {
            optimizer: optimizer.to_string(),
            cost_model: self.cost_model.clone(),
            unit: self.unit,
            devices: self.p,
            total: ops.iter().map(|o| o.cost.total()).sum(),
            total_bytes: ops.iter().map(|o| o.cost.bytes).sum(),
            resident_bytes: self.resident_bytes(choice),
            memory_budget: self.memory_budget,
            search: None,
            ops,
        })
    }

    /// [`Error::InvalidPlan`] unless `choice` names one candidate of every operator.
    pub fn check(&self, choice: &[usize]) -> Result<()> {
        if choice.len() != self.ops.len() {
            return Err(Error::InvalidPlan(format!("{} choices for {} operators", choice.len(), self.ops.len())));
        }
        for (op, &n) in self.ops.iter().zip(choice) {
            if n >= op.candidates.len() {
                return Err(Error::InvalidPlan(format!("{}: candidate {n} of {}", op.name, op.candidates.len())));
            }
        }
        Ok(())
    }
}

impl Candidate {
    /// Every interval-count vector that requests this spec: [`counts`](Self::counts), then
    /// the [`aliases`](Self::aliases).
    pub fn all_counts(&self) -> impl Iterator<Item = &[usize]> {
        std::iter::once(self.counts.as_slice()).chain(self.aliases.iter().map(Vec::as_slice))
    }
}

impl OpProblem {
    /// The cost of repartitioning input `k` from the tiling `from` to the tiling `to`: zero
    /// when they are equal, else the priced pair, else [`repartition`](Self::repartition).
    pub fn repartition_cost(&self, k: usize, from: TilingId, to: TilingId) -> f64 {
        if from == to {
            return 0.0;
        }
        self.repartition_pairs
            .get(k)
            .and_then(Option::as_ref)
            .and_then(|pairs| pairs.get(&(from, to)).copied())
            .unwrap_or(self.repartition[k])
    }

    /// The position of the shardable index called `name`, if the operator has one.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.shardable.iter().position(|s| s == name)
    }

    /// The position of the shardable index whose role is `role`: the first one, in
    /// shardable order, when several names of the operator share the role.
    pub fn position_with_role(&self, role: IndexRole) -> Option<usize> {
        self.roles.iter().position(|r| *r == Some(role))
    }

    /// The name of the shardable index whose role is `role` (see
    /// [`position_with_role`](Self::position_with_role)).
    pub fn index_with_role(&self, role: IndexRole) -> Option<&str> {
        self.position_with_role(role).map(|i| self.shardable[i].as_str())
    }

    /// True when the operator declares it is `role` (e.g. [`OpRole::Attention`]).
    pub fn is(&self, role: OpRole) -> bool {
        self.op_role == Some(role)
    }

    /// The candidate whose spec the interval counts `counts` request (directly or as an
    /// alias), if any.
    pub fn find(&self, counts: &[usize]) -> Option<usize> {
        self.candidates.iter().position(|c| c.all_counts().any(|k| k == counts))
    }
}

/// Interns block sets as [`TilingId`]s: equal sets (in any order) get equal ids, numbered
/// in order of first appearance.
#[derive(Default)]
struct Interner {
    ids: FastMap<Vec<TensorType>, TilingId>,
    /// The blocks of every id, sorted.
    blocks: Vec<Vec<TensorType>>,
}

impl Interner {
    fn id(&mut self, mut blocks: Vec<TensorType>) -> TilingId {
        blocks.sort();
        let next = TilingId(self.ids.len() as u32);
        match self.ids.entry(blocks) {
            Entry::Occupied(seen) => *seen.get(),
            Entry::Vacant(slot) => {
                self.blocks.push(slot.key().clone());
                *slot.insert(next)
            }
        }
    }

    fn blocks(&self, id: TilingId) -> &[TensorType] {
        &self.blocks[id.0 as usize]
    }
}

/// Prices, for every input produced by an operator, the repartition between each of the
/// producer's output tilings and each tiling the consumer's candidates need. Pairs are
/// priced once per dtype and shared: the layers of a stack ask the same questions.
fn price_repartition_pairs(
    ops: &mut [OpProblem],
    descs: &[Vec<einsum_core::TensorDesc>],
    interner: &Interner,
    p: usize,
    cost: &dyn CostModel,
) {
    let mut priced: FastMap<(TilingId, TilingId, einsum_core::DType), f64> = FastMap::default();
    let mut tables: FastMap<(BTreeSet<TilingId>, BTreeSet<TilingId>, einsum_core::DType), Arc<RepartitionPairs>> =
        FastMap::default();
    for c in 0..ops.len() {
        let mut pairs = Vec::with_capacity(ops[c].sources.len());
        for (k, source) in ops[c].sources.iter().enumerate() {
            let Source::Op { op, output } = *source else {
                pairs.push(None);
                continue;
            };
            let desc = &descs[c][k];
            let from: BTreeSet<TilingId> = ops[op].candidates.iter().map(|x| x.outputs[output]).collect();
            let to: BTreeSet<TilingId> = ops[c].candidates.iter().map(|x| x.inputs[k]).collect();
            let key = (from, to, desc.dtype);
            let table = match tables.get(&key) {
                Some(t) => Arc::clone(t),
                None => {
                    let mut table = RepartitionPairs::default();
                    for &f in &key.0 {
                        for &t in key.1.iter().filter(|&&t| t != f) {
                            let price = *priced.entry((f, t, desc.dtype)).or_insert_with(|| {
                                cost.repartition_between(desc, interner.blocks(f), interner.blocks(t), p)
                            });
                            table.insert((f, t), price);
                        }
                    }
                    let table = Arc::new(table);
                    tables.insert(key, Arc::clone(&table));
                    table
                }
            };
            pairs.push(Some(table));
        }
        ops[c].repartition_pairs = pairs;
    }
}

/// Every candidate of `op` on `p` devices, priced by `cost` (`resident[k]`: input `k` is a
/// computation input), with aliases recorded and tilings interned.
fn candidates(
    op: &dyn AbstractOperator,
    p: usize,
    cost: &dyn CostModel,
    resident: &[bool],
    interner: &mut Interner,
) -> Result<Vec<Candidate>> {
    let mut candidates = Vec::new();
    for choice in enumerate_specs(op, p)? {
        let spec = choice.spec;
        let bytes = bytes_of(op, &spec);
        let priced = cost.spec(op, &spec, p, resident);
        let resident_bytes = resident_bytes_of(op, &spec, resident);
        if [priced.join, priced.aggregation, priced.compute].iter().any(|c| !c.is_finite() || *c < 0.0) {
            return Err(Error::InvalidPlan(format!(
                "{}: the {} cost model priced a spec at {priced:?}; costs must be finite and non-negative",
                op.kind(),
                cost.name()
            )));
        }
        candidates.push(Candidate {
            counts: choice.counts,
            aliases: Vec::new(),
            outputs: (0..op.outputs().len()).map(|j| interner.id(spec.output_blocks(j))).collect(),
            inputs: (0..op.inputs().len()).map(|k| interner.id(spec.input_blocks(k))).collect(),
            cost: priced,
            bytes,
            resident_bytes,
            spec,
        });
    }
    add_aliases(op, p, &mut candidates);
    Ok(candidates)
}

/// What [`Problem::new`] compares to decide that two operators of one computation share
/// their candidates: the operator's concrete type, its `Debug` rendering, and which of its
/// inputs are computation inputs.
///
/// # Soundness
/// A sharing operator gets a copy of the first equal operator's [`Candidate`]s, so the
/// problem is the same as [`Problem::new_unshared`]'s (same candidates, costs, tilings and
/// order) exactly when everything [`candidates`] computes is a function of the key (the
/// device count `p` is fixed within one call, so it need not be part of it):
/// - **Enumeration** (`enumerate_specs`, `add_aliases`) and the proxy bytes (`bytes_of`)
///   read the operator only through its [`AbstractOperator`] methods, which depend only on
///   its type and fields. Equal type and equal `Debug` output mean equal fields when the
///   type's `Debug` prints every field that its methods read: every operator of
///   `einsum-ops` (`Einsum`, `Binary`, `Unary`, `Reduce`, `Softmax`, `RmsNorm`,
///   `LayerNorm`, `Rope`, `Attention`) derives `Debug` over all of its fields, and so do
///   the field types they hold (`TensorDesc`, `Packing`, `AttentionConfig`, the op enums;
///   `f32` parameters print as their shortest round-tripping decimal, so distinct values
///   print differently). An operator with a hand-written `Debug` that hides a field its
///   specs or costs depend on would be wrongly shared, so operators must not have one.
/// - **Pricing** ([`CostModel::spec`]) is given the operator, the spec, `p` and, per input,
///   only whether it is resident (a computation input), so the key holds that flag and not
///   the producing operator (which differs from layer to layer and would defeat sharing).
/// - **Tilings** are interned by block set, and interning is idempotent: the blocks of a
///   copy were interned when the first equal operator was, so a fresh pass would return
///   the ids the copy carries, and create no new ids that would renumber later tilings.
/// - **Errors** are the same: a failing first operator fails the call before any copy.
#[derive(PartialEq, Eq, Hash)]
struct SharingKey {
    /// The operator's concrete type (two types may print alike).
    ty: TypeId,
    /// Its `Debug` rendering: every parameter that its specs and costs depend on.
    debug: String,
    /// Per input, whether it is a computation input ([`Source::Input`]): the costs and the
    /// resident bytes depend on it.
    resident: Vec<bool>,
}

impl SharingKey {
    fn of(op: &dyn AbstractOperator, resident: &[bool]) -> SharingKey {
        let any: &dyn Any = op;
        SharingKey { ty: any.type_id(), debug: format!("{op:?}"), resident: resident.to_vec() }
    }
}

/// Records, on the candidate whose spec it requests, every factorization of `p` over the
/// operator's shardable indices that enumeration dropped as a duplicate. Requests that are
/// unsupported or cannot be split are skipped: they name no candidate.
fn add_aliases(op: &dyn AbstractOperator, p: usize, candidates: &mut [Candidate]) {
    let shardable = op.shardable();
    let max: Vec<usize> = shardable.iter().map(|s| s.max_parts()).collect();
    for counts in factorizations(p, &max) {
        if candidates.iter().any(|c| c.counts == counts) {
            continue;
        }
        let Some(intervals) = shardable.iter().zip(&counts).map(|(s, &c)| s.intervals(c)).collect::<Option<Vec<_>>>()
        else {
            continue;
        };
        let Ok(spec) = op.join_agg_spec(&intervals) else { continue };
        if let Some(c) = candidates.iter_mut().find(|c| c.spec == spec) {
            c.aliases.push(counts);
        }
    }
}

/// The most bytes of computation-input blocks (`resident[k]`) that one function spec of
/// `spec` reads.
fn resident_bytes_of(op: &dyn AbstractOperator, spec: &JoinAggSpec, resident: &[bool]) -> f64 {
    let descs = op.inputs();
    spec.functions
        .iter()
        .map(|f| {
            f.inputs
                .iter()
                .zip(descs)
                .zip(resident)
                .filter(|(_, r)| **r)
                .map(|((block, d), _)| (block.volume() * d.dtype.size_bytes()) as f64)
                .sum::<f64>()
        })
        .fold(0.0, f64::max)
}

fn bytes_of(op: &dyn einsum_joinagg::AbstractOperator, spec: &JoinAggSpec) -> f64 {
    let join = crate::cost::join_elements(spec, op.inputs().len());
    let agg =
        crate::cost::aggregation_elements(&crate::cost::multiplicities(spec, op.outputs().len()), op.aggregation());
    let w = |d: &einsum_core::TensorDesc| d.dtype.size_bytes() as f64;
    join.iter().zip(op.inputs()).map(|(e, d)| e * w(d)).sum::<f64>()
        + agg.iter().zip(op.outputs()).map(|(e, d)| e * w(d)).sum::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use einsum_core::{DType, TensorDesc};
    use einsum_ops::unary::{Unary, UnaryOp};

    /// The key names the operator's concrete type (not `dyn AbstractOperator`'s) and tells
    /// computation inputs from produced ones.
    #[test]
    fn the_sharing_key_sees_the_concrete_type_and_the_resident_inputs() {
        let x = TensorDesc::of(&[("i", 4)], DType::F32).unwrap();
        let op: Box<dyn AbstractOperator> = Box::new(Unary::new(&x, UnaryOp::Silu).unwrap());
        let input = SharingKey::of(op.as_ref(), &[true]);
        let produced = SharingKey::of(op.as_ref(), &[false]);
        assert!(input.ty == TypeId::of::<Unary>());
        assert!(input.debug.starts_with("Unary") && input.debug.contains("Silu"), "{}", input.debug);
        assert!(input != produced);
        assert!(produced == SharingKey::of(op.as_ref(), &[false]));
    }
}
