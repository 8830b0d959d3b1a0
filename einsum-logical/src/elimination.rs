//! The exact optimum on a DAG, by min-sum variable elimination over the problem's tensors.
//!
//! # Formulation
//! A plan's total ([`Problem::total`]) is a sum of one term per operator: its candidate's
//! cost plus, for every input produced by another operator, the repartition between the
//! producer's output tiling and the blocks the candidate needs. Take as variables the
//! *tensors* an operator produces, each valued over the distinct tilings its producer's
//! candidates give it (Algorithm 1's state: far fewer values than an operator has specs).
//! Operator `o` is then one factor over its output tensors and the tensors it reads,
//!
//! `f_o(T_out, T_1 … T_n) = min over candidates J with out(J) = T_out of
//!  cost(J) + Σ_k repartition_k(T_k, in_k(J))`,
//!
//! and the optimum is `min Σ_o f_o` over all tensor values. Bucket elimination computes it
//! exactly: tensors are eliminated one at a time, each replacing the factors that mention it
//! by their sum minimised over its values, a table over the tensors they share it with. The
//! work is exponential only in the elimination order's *width* (the most tensors one new
//! table ranges over). The order is chosen greedily, always eliminating the tensor whose
//! new table is smallest; on a tree it eliminates leaves first and is the paper's DP, and on
//! the DAGs of transformer blocks (residuals, the Q/K/V and gate/up fan-outs) the width
//! stays at three or four whatever the depth of the stack. A backward pass over the order
//! recovers each tensor's value, then each operator's cheapest candidate consistent with
//! them (ties to the lowest value and the lowest candidate index, so the plan is
//! deterministic).
//!
//! # Limits
//! Tables hold at most [`MAX_TABLE_ENTRIES`] entries. Where a table would be larger, its
//! factors are split into *mini-buckets* that each fit, eliminated apart (an operator's
//! own factor too large to tabulate is relaxed per tensor it reads). The minimum of a sum
//! is at least the sum of the minima, so the result is a lower bound on the optimum rather
//! than the optimum, and the backward pass a heuristic plan; [`Solved::exact`] says which.
//!
//! # Sharing
//! The repartition matrices (a producer's tilings against the blocks a consumer needs) and
//! operators' tables depend only on the candidate lists and priced pairs, which the layers
//! of a stack share (see [`Problem::new`]): both are computed once per distinct key, so an
//! 80-layer stack tabulates as many operator tables as one layer.

use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::Arc;

use einsum_core::FastMap;

use crate::{Candidate, OpProblem, Problem, Source, TilingId};

/// The most entries one table may hold (8 bytes each, so 32 MiB): beyond it, elimination
/// is relaxed into mini-buckets (see the module doc).
pub const MAX_TABLE_ENTRIES: usize = 1 << 22;

/// A tensor variable: output `output` of operator `op`.
#[derive(Clone, Debug)]
struct Var {
    op: usize,
    output: usize,
    /// Its distinct tilings (its domain).
    size: usize,
}

/// One input slot of an operator that reads another operator's output.
#[derive(Clone, Debug)]
struct Slot {
    var: usize,
    /// The distinct blocks the operator's candidates need on this input.
    needs: usize,
    /// Per candidate: which of them it needs.
    need_of: Rc<[u32]>,
    /// `moves[value · needs + need]`: the repartition from the tensor's value to a need.
    moves: Rc<[f64]>,
}

/// One operator's factor, before tabulation.
#[derive(Clone, Debug)]
struct OpModel {
    /// Its output tensors.
    outputs: Vec<usize>,
    /// Per candidate and output (`c · outputs + j`): the output tensor's value.
    value_of: Rc<[u32]>,
    /// Its inputs produced by operators.
    slots: Vec<Slot>,
    /// The tensors it reads, each once, in slot order.
    reads: Vec<usize>,
    /// Per slot: its tensor's position in `reads`.
    read_of: Vec<usize>,
}

/// A table over some tensors, row-major (the last tensor's value varies fastest).
#[derive(Clone, Debug)]
struct Table {
    vars: Vec<usize>,
    strides: Vec<usize>,
    values: Rc<[f64]>,
}

impl Table {
    fn new(vars: Vec<usize>, sizes: &[usize], values: Rc<[f64]>) -> Table {
        Table { vars, strides: row_major(sizes), values }
    }

    /// The stride of `var` in this table, zero when it is not one of its tensors.
    fn stride(&self, var: usize) -> usize {
        self.vars.iter().position(|&v| v == var).map_or(0, |i| self.strides[i])
    }

    /// The entry at the values `value` gives its tensors.
    fn at(&self, value: &[u32]) -> f64 {
        let offset: usize = self.vars.iter().zip(&self.strides).map(|(&v, &s)| value[v] as usize * s).sum();
        self.values[offset]
    }
}

/// The result of one elimination.
#[derive(Clone, Debug)]
pub(crate) struct Solved {
    /// The chosen candidate per operator.
    pub choice: Vec<usize>,
    /// The minimum of `total + λ · resident` when [`exact`](Self::exact), else a lower
    /// bound on it.
    pub bound: f64,
    /// True when no table had to be relaxed: `choice` is the exact optimum.
    pub exact: bool,
}

/// The tables not yet eliminated, and the sum of those over no tensor.
struct Pool {
    factors: Vec<Option<Table>>,
    /// Per tensor: the tables that mention it (some already taken).
    containing: Vec<Vec<usize>>,
    bound: f64,
}

impl Pool {
    fn add(&mut self, table: Table) {
        if table.vars.is_empty() {
            self.bound += table.values[0];
            return;
        }
        for &v in &table.vars {
            self.containing[v].push(self.factors.len());
        }
        self.factors.push(Some(table));
    }

    /// Removes and returns every table that mentions `x`.
    fn take(&mut self, x: usize) -> Vec<Table> {
        std::mem::take(&mut self.containing[x]).into_iter().filter_map(|f| self.factors[f].take()).collect()
    }
}

/// A problem prepared for elimination: its tensors, operator factors and order, which do
/// not depend on the Lagrange multiplier of a memory budget, so one preparation serves every
/// run of a budgeted search.
pub(crate) struct Elimination<'p> {
    problem: &'p Problem,
    vars: Vec<Var>,
    ops: Vec<OpModel>,
    /// The tensors in elimination order.
    order: Vec<usize>,
    /// The elimination order's width: the most tensors one new table ranges over.
    width: usize,
    /// The most entries of one table the order creates, unrelaxed (saturating).
    largest: f64,
    /// The most entries of one table.
    limit: usize,
    /// True when no table (an operator's or one the order creates) exceeds `limit`.
    exact: bool,
    /// Operator tables already computed, by what they depend on.
    tables: std::cell::RefCell<FastMap<TableKey, Rc<[f64]>>>,
}

/// What an operator's table depends on: its candidate list, the matrices of its slots with
/// the tensor each reads, and the multiplier.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct TableKey {
    candidates: usize,
    slots: Vec<(usize, usize)>,
    dims: Vec<usize>,
    lambda: u64,
}

/// What a repartition matrix depends on: the producer's candidate list and output, the
/// consumer's candidate list and input slot, and that input's priced pairs and fallback cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct MoveKey {
    producer: usize,
    output: usize,
    consumer: usize,
    slot: usize,
    pairs: usize,
    fallback: u64,
}

impl<'p> Elimination<'p> {
    /// Prepares `problem` (checked well formed by the caller), with tables of at most
    /// `limit` entries ([`MAX_TABLE_ENTRIES`] but in tests).
    pub(crate) fn new(problem: &'p Problem, limit: usize) -> Elimination<'p> {
        let address = |op: &OpProblem| Arc::as_ptr(&op.candidates) as *const Candidate as usize;
        // Per candidate list: the distinct tilings of each output and every candidate's value.
        let mut domains: FastMap<usize, Distinct> = FastMap::default();
        let mut vars = Vec::new();
        let mut var_of: Vec<Vec<usize>> = Vec::with_capacity(problem.ops.len());
        for (o, op) in problem.ops.iter().enumerate() {
            let tilings = &domains.entry(address(op)).or_insert_with(|| outputs(&op.candidates)).tilings;
            var_of.push((0..tilings.len()).map(|j| vars.len() + j).collect());
            vars.extend(tilings.iter().enumerate().map(|(output, t)| Var { op: o, output, size: t.len() }));
        }
        let mut needs: FastMap<(usize, usize), Distinct> = FastMap::default();
        let mut moves: FastMap<MoveKey, Rc<[f64]>> = FastMap::default();
        let mut ops = Vec::with_capacity(problem.ops.len());
        for (c, op) in problem.ops.iter().enumerate() {
            let mut slots = Vec::new();
            let mut reads: Vec<usize> = Vec::new();
            let mut read_of = Vec::new();
            for (k, source) in op.sources.iter().enumerate() {
                let Source::Op { op: p, output } = *source else { continue };
                let var = var_of[p][output];
                let need = needs
                    .entry((address(op), k))
                    .or_insert_with(|| distinct(op.candidates.iter().map(|cand| cand.inputs[k])));
                let pairs = op.repartition_pairs.get(k).and_then(Option::as_ref).map_or(0, |p| Arc::as_ptr(p) as usize);
                let key = MoveKey {
                    producer: address(&problem.ops[p]),
                    output,
                    consumer: address(op),
                    slot: k,
                    pairs,
                    fallback: op.repartition[k].to_bits(),
                };
                let matrix = moves
                    .entry(key)
                    .or_insert_with(|| {
                        let from = &domains[&address(&problem.ops[p])].tilings[output];
                        let to = &need.tilings[0];
                        from.iter()
                            .flat_map(|&f| to.iter().map(move |&t| (f, t)))
                            .map(|(f, t)| op.repartition_cost(k, f, t))
                            .collect()
                    })
                    .clone();
                slots.push(Slot { var, needs: need.tilings[0].len(), need_of: need.value_of.clone(), moves: matrix });
                read_of.push(reads.iter().position(|&v| v == var).unwrap_or_else(|| {
                    reads.push(var);
                    reads.len() - 1
                }));
            }
            ops.push(OpModel {
                outputs: var_of[c].clone(),
                value_of: domains[&address(op)].value_of.clone(),
                slots,
                reads,
                read_of,
            });
        }
        let (order, width, largest) = order(&vars, &ops);
        let op_entries =
            ops.iter().map(|m| m.outputs.iter().chain(&m.reads).fold(1.0, |a, &v| a * vars[v].size as f64));
        let exact = largest.max(op_entries.fold(1.0, f64::max)) <= limit as f64;
        Elimination { problem, vars, ops, order, width, largest, limit, exact, tables: Default::default() }
    }

    /// The tensors in elimination order, each named `operator` (or `operator:output` for an
    /// operator with several outputs).
    pub(crate) fn order_names(&self) -> Vec<String> {
        self.order
            .iter()
            .map(|&v| {
                let var = &self.vars[v];
                let op = &self.problem.ops[var.op];
                if self.ops[var.op].outputs.len() > 1 { format!("{}:{}", op.name, var.output) } else { op.name.clone() }
            })
            .collect()
    }

    /// True when no table exceeds the limit: [`solve`](Self::solve) is exact.
    pub(crate) fn exact(&self) -> bool {
        self.exact
    }

    /// The elimination order's width.
    pub(crate) fn width(&self) -> usize {
        self.width
    }

    /// The most entries of one table the order creates, unrelaxed (saturating at
    /// `usize::MAX`).
    pub(crate) fn largest_table(&self) -> usize {
        if self.largest >= usize::MAX as f64 { usize::MAX } else { self.largest as usize }
    }

    /// The plan minimising `total + lambda · resident bytes`, exact unless a table had to
    /// be relaxed.
    pub(crate) fn solve(&self, lambda: f64) -> Solved {
        let sizes: Vec<usize> = self.vars.iter().map(|v| v.size).collect();
        let mut exact = true;
        let mut pool = Pool { factors: Vec::new(), containing: vec![Vec::new(); self.vars.len()], bound: 0.0 };
        for (o, model) in self.ops.iter().enumerate() {
            for table in self.op_tables(o, model, lambda, &sizes, &mut exact) {
                pool.add(table);
            }
        }
        let mut buckets: Vec<Vec<Table>> = vec![Vec::new(); self.vars.len()];
        for &x in &self.order {
            let bucket = pool.take(x);
            for group in mini_buckets(&bucket, x, &sizes, self.limit, &mut exact) {
                let parts: Vec<&Table> = group.iter().map(|&i| &bucket[i]).collect();
                pool.add(eliminate(&parts, x, &sizes));
            }
            buckets[x] = bucket;
        }
        // The backward pass: each tensor's cheapest value given those eliminated after it.
        let mut value = vec![0u32; self.vars.len()];
        for &x in self.order.iter().rev() {
            let mut best = (f64::INFINITY, 0);
            for v in 0..sizes[x] as u32 {
                value[x] = v;
                let cost: f64 = buckets[x].iter().map(|t| t.at(&value)).sum();
                if cost < best.0 {
                    best = (cost, v);
                }
            }
            value[x] = best.1;
        }
        let choice = self.ops.iter().enumerate().map(|(o, model)| self.candidate(o, model, lambda, &value)).collect();
        Solved { choice, bound: pool.bound, exact }
    }

    /// The candidate of operator `o` with the least cost under the tensors' values, among
    /// those producing its outputs' values (any, should none: only after a relaxation).
    fn candidate(&self, o: usize, model: &OpModel, lambda: f64, value: &[u32]) -> usize {
        let op = &self.problem.ops[o];
        let width = model.outputs.len();
        let mut best = (f64::INFINITY, None, f64::INFINITY, 0);
        for (n, cand) in op.candidates.iter().enumerate() {
            let mut cost = base(cand, lambda);
            for slot in &model.slots {
                cost += slot.moves[value[slot.var] as usize * slot.needs + slot.need_of[n] as usize];
            }
            let consistent = model.outputs.iter().enumerate().all(|(j, &v)| model.value_of[n * width + j] == value[v]);
            if consistent && (best.1.is_none() || cost < best.0) {
                best.0 = cost;
                best.1 = Some(n);
            }
            if cost < best.2 {
                best.2 = cost;
                best.3 = n;
            }
        }
        best.1.unwrap_or(best.3)
    }

    /// Operator `o`'s factor as one table over its outputs then the tensors it reads, or,
    /// when that would exceed the limit, relaxed into one table per tensor it
    /// reads (and `exact` cleared).
    fn op_tables(&self, o: usize, model: &OpModel, lambda: f64, sizes: &[usize], exact: &mut bool) -> Vec<Table> {
        let op = &self.problem.ops[o];
        let vars: Vec<usize> = model.outputs.iter().chain(&model.reads).copied().collect();
        let dims: Vec<usize> = vars.iter().map(|&v| sizes[v]).collect();
        let entries = dims.iter().fold(1.0, |a, &d| a * d as f64);
        if entries > self.limit as f64 {
            *exact = false;
            return self.relaxed_op_tables(op, model, lambda, sizes);
        }
        let key = TableKey {
            candidates: Arc::as_ptr(&op.candidates) as *const Candidate as usize,
            slots: model
                .slots
                .iter()
                .zip(&model.read_of)
                .map(|(s, &r)| (Rc::as_ptr(&s.moves) as *const f64 as usize, r))
                .collect(),
            dims: dims.clone(),
            lambda: lambda.to_bits(),
        };
        if let Some(values) = self.tables.borrow().get(&key) {
            return vec![Table::new(vars, &dims, values.clone())];
        }
        let strides = row_major(&dims);
        let width = model.outputs.len();
        let reads = model.reads.len();
        let mut values = vec![f64::INFINITY; entries as usize];
        // Per candidate, the repartition of each read tensor's every value.
        let mut terms: Vec<Vec<f64>> = model.reads.iter().map(|&v| vec![0.0; sizes[v]]).collect();
        let mut digits = vec![0usize; reads];
        for (n, cand) in op.candidates.iter().enumerate() {
            for t in &mut terms {
                t.fill(0.0);
            }
            for (slot, &r) in model.slots.iter().zip(&model.read_of) {
                let need = slot.need_of[n] as usize;
                for (v, term) in terms[r].iter_mut().enumerate() {
                    *term += slot.moves[v * slot.needs + need];
                }
            }
            let start: usize = (0..width).map(|j| model.value_of[n * width + j] as usize * strides[j]).sum();
            let cost = base(cand, lambda);
            digits.fill(0);
            loop {
                let offset = start + (0..reads).map(|i| digits[i] * strides[width + i]).sum::<usize>();
                let total = cost + (0..reads).map(|i| terms[i][digits[i]]).sum::<f64>();
                if total < values[offset] {
                    values[offset] = total;
                }
                if !advance(&mut digits, &dims[width..]) {
                    break;
                }
            }
        }
        let values: Rc<[f64]> = values.into();
        self.tables.borrow_mut().insert(key, values.clone());
        vec![Table { vars, strides, values }]
    }

    /// A lower bound on an operator's factor as a sum of one table per tensor it reads:
    /// `min_J Σ_u g_u(J, T_u) ≥ Σ_u min_J g_u(J, T_u)` with the candidate's own cost split
    /// evenly between them (its outputs' coupling dropped).
    fn relaxed_op_tables(&self, op: &OpProblem, model: &OpModel, lambda: f64, sizes: &[usize]) -> Vec<Table> {
        let reads = model.reads.len();
        if reads == 0 {
            let least = op.candidates.iter().map(|c| base(c, lambda)).fold(f64::INFINITY, f64::min);
            return vec![Table::new(Vec::new(), &[], Rc::from(vec![least]))];
        }
        let mut values: Vec<Vec<f64>> = model.reads.iter().map(|&v| vec![f64::INFINITY; sizes[v]]).collect();
        for (n, cand) in op.candidates.iter().enumerate() {
            let share = base(cand, lambda) / reads as f64;
            for (r, row) in values.iter_mut().enumerate() {
                for (v, entry) in row.iter_mut().enumerate() {
                    let moved: f64 = model
                        .slots
                        .iter()
                        .zip(&model.read_of)
                        .filter(|&(_, &of)| of == r)
                        .map(|(s, _)| s.moves[v * s.needs + s.need_of[n] as usize])
                        .sum();
                    *entry = entry.min(share + moved);
                }
            }
        }
        model.reads.iter().zip(values).map(|(&v, row)| Table::new(vec![v], &[sizes[v]], row.into())).collect()
    }
}

/// A candidate's own cost under the multiplier `lambda`.
fn base(cand: &Candidate, lambda: f64) -> f64 {
    let cost = cand.cost.total();
    if lambda > 0.0 { cost + lambda * cand.resident_bytes } else { cost }
}

/// The distinct tilings of some columns (a candidate list's outputs, or the blocks its
/// candidates need on one input), each in order of first appearance, and every candidate's
/// position among them.
struct Distinct {
    /// Per column: its distinct tilings.
    tilings: Vec<Vec<TilingId>>,
    /// Per candidate and column (`c · columns + j`): its tiling's position.
    value_of: Rc<[u32]>,
}

/// The one column of `items`.
fn distinct(items: impl Iterator<Item = TilingId>) -> Distinct {
    let mut list: Vec<TilingId> = Vec::new();
    let mut index: FastMap<TilingId, u32> = FastMap::default();
    let value_of = items
        .map(|t| {
            *index.entry(t).or_insert_with(|| {
                list.push(t);
                (list.len() - 1) as u32
            })
        })
        .collect();
    Distinct { tilings: vec![list], value_of }
}

/// The output columns of a candidate list.
fn outputs(candidates: &[Candidate]) -> Distinct {
    let width = candidates.first().map_or(0, |c| c.outputs.len());
    let mut tilings = Vec::with_capacity(width);
    let mut value_of = vec![0u32; candidates.len() * width];
    for j in 0..width {
        let column = distinct(candidates.iter().map(|c| c.outputs[j]));
        for (n, &p) in column.value_of.iter().enumerate() {
            value_of[n * width + j] = p;
        }
        tilings.extend(column.tilings);
    }
    Distinct { tilings, value_of: value_of.into() }
}

/// The strides of a row-major table with these extents (the last varies fastest).
fn row_major(sizes: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; sizes.len()];
    for i in (0..sizes.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * sizes[i + 1];
    }
    strides
}

/// Advances a mixed-radix counter, last digit fastest; false once it wraps to zero.
fn advance(digits: &mut [usize], radix: &[usize]) -> bool {
    for i in (0..digits.len()).rev() {
        digits[i] += 1;
        if digits[i] < radix[i] {
            return true;
        }
        digits[i] = 0;
    }
    false
}

/// The elimination order: greedily the tensor whose new table is smallest (ties to fewer
/// neighbours, then the lowest index), with the order's width and the largest table's
/// entries.
fn order(vars: &[Var], ops: &[OpModel]) -> (Vec<usize>, usize, f64) {
    let n = vars.len();
    let mut adjacent: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
    for model in ops {
        let scope: Vec<usize> = model.outputs.iter().chain(&model.reads).copied().collect();
        for &a in &scope {
            adjacent[a].extend(scope.iter().copied().filter(|&b| b != a));
        }
    }
    // A tensor's priority: its new table's entries (a non-negative float, so its bits order
    // as it does), its neighbour count, its index.
    let key = |adjacent: &[BTreeSet<usize>], v: usize| {
        let entries = adjacent[v].iter().fold(1.0f64, |a, &u| a * vars[u].size as f64);
        (entries.to_bits(), adjacent[v].len(), v)
    };
    let mut keys: Vec<(u64, usize, usize)> = (0..n).map(|v| key(&adjacent, v)).collect();
    let mut queue: BTreeSet<(u64, usize, usize)> = keys.iter().copied().collect();
    let (mut order, mut width, mut largest) = (Vec::with_capacity(n), 0, 1.0f64);
    while let Some((entries, degree, x)) = queue.pop_first() {
        order.push(x);
        width = width.max(degree);
        largest = largest.max(f64::from_bits(entries));
        let neighbours: Vec<usize> = std::mem::take(&mut adjacent[x]).into_iter().collect();
        for &a in &neighbours {
            adjacent[a].remove(&x);
            adjacent[a].extend(neighbours.iter().copied().filter(|&b| b != a));
        }
        for &a in &neighbours {
            queue.remove(&keys[a]);
            keys[a] = key(&adjacent, a);
            queue.insert(keys[a]);
        }
    }
    (order, width, largest)
}

/// The bucket of tensor `x` split into groups whose new tables fit `limit` entries:
/// one group when the whole bucket's does (`exact` is then left alone), else a greedy
/// packing of its tables, largest scope first (and `exact` cleared).
fn mini_buckets(bucket: &[Table], x: usize, sizes: &[usize], limit: usize, exact: &mut bool) -> Vec<Vec<usize>> {
    let entries = |scope: &[usize]| scope.iter().filter(|&&v| v != x).fold(1.0, |a, &v| a * sizes[v] as f64);
    let scope = union(bucket.iter().map(|t| t.vars.as_slice()));
    if entries(&scope) <= limit as f64 {
        return vec![(0..bucket.len()).collect()];
    }
    *exact = false;
    let mut by_size: Vec<usize> = (0..bucket.len()).collect();
    by_size.sort_by(|&a, &b| entries(&bucket[b].vars).total_cmp(&entries(&bucket[a].vars)).then(a.cmp(&b)));
    let mut groups: Vec<(Vec<usize>, Vec<usize>)> = Vec::new();
    for t in by_size {
        let fits = groups.iter().position(|(_, scope)| {
            entries(&union([scope.as_slice(), bucket[t].vars.as_slice()].into_iter())) <= limit as f64
        });
        match fits {
            Some(g) => {
                groups[g].1 = union([groups[g].1.as_slice(), bucket[t].vars.as_slice()].into_iter());
                groups[g].0.push(t);
            }
            None => groups.push((vec![t], bucket[t].vars.clone())),
        }
    }
    groups.into_iter().map(|(g, _)| g).collect()
}

/// The sorted union of some tensor lists.
fn union<'a>(scopes: impl Iterator<Item = &'a [usize]>) -> Vec<usize> {
    let mut all: Vec<usize> = scopes.flatten().copied().collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// The sum of `tables` minimised over tensor `x`: a table over the other tensors they
/// mention, in increasing order. A single table over the limit (one an operator's
/// relaxation could not shrink) is eliminated all the same.
fn eliminate(tables: &[&Table], x: usize, sizes: &[usize]) -> Table {
    let scope: Vec<usize> = union(tables.iter().map(|t| t.vars.as_slice())).into_iter().filter(|&v| v != x).collect();
    let dims: Vec<usize> = scope.iter().map(|&v| sizes[v]).collect();
    let entries: usize = dims.iter().product();
    let along_x: Vec<usize> = tables.iter().map(|t| t.stride(x)).collect();
    let strides: Vec<Vec<usize>> = tables.iter().map(|t| scope.iter().map(|&v| t.stride(v)).collect()).collect();
    let mut offsets = vec![0usize; tables.len()];
    let mut digits = vec![0usize; scope.len()];
    let mut values = Vec::with_capacity(entries);
    // The bucket's sum along `x` at the current entry, one table at a time (every table of
    // the bucket mentions `x`, so each stride along it is positive).
    let mut sum = vec![0.0; sizes[x]];
    for _ in 0..entries {
        for (i, ((t, &o), &s)) in tables.iter().zip(&offsets).zip(&along_x).enumerate() {
            let row = t.values[o..].iter().step_by(s);
            if i == 0 {
                sum.iter_mut().zip(row).for_each(|(a, &b)| *a = b);
            } else {
                sum.iter_mut().zip(row).for_each(|(a, &b)| *a += b);
            }
        }
        values.push(sum.iter().fold(f64::INFINITY, |least, &v| if v < least { v } else { least }));
        // Advance the counter over `scope`, moving every table's offset along.
        for i in (0..scope.len()).rev() {
            digits[i] += 1;
            for (o, s) in offsets.iter_mut().zip(&strides) {
                *o += s[i];
            }
            if digits[i] < dims[i] {
                break;
            }
            for (o, s) in offsets.iter_mut().zip(&strides) {
                *o -= s[i] * dims[i];
            }
            digits[i] = 0;
        }
    }
    Table::new(scope, &dims, values.into())
}
