//! The default strategy: the dynamic program of Section 4.2 (Algorithm 1), made exact on
//! DAGs by variable elimination, with the edge cases of 4.5.

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use crate::elimination::{Elimination, MAX_TABLE_ENTRIES};
use crate::{Candidate, Error, LogicalOptimizer, OpProblem, Problem, Result, SearchReport, Source, TilingId};

/// Algorithm 1 generalised from trees to DAGs: the exact optimum of [`Problem::total`].
///
/// Algorithm 1 computes, per operator and tiling of its output, the cheapest way to produce
/// it; its state is a tensor's tiling, and it is exact on trees. Every real model is a DAG
/// (residual connections, the Q/K/V fan-out of attention, the gate/up pair of SwiGLU), so
/// the search runs the same recurrence as min-sum variable elimination over the tensors
/// (`elimination.rs`): a tensor's values are its producer's output tilings, an operator is
/// one factor over the tensors it produces and reads (its cheapest candidate for those
/// tilings, repartitions included), and eliminating the tensors one at a time in a greedy
/// order is exact in time exponential only in the order's width. On a tree the order takes
/// leaves first and this is Algorithm 1; on a transformer block or a stack of them the
/// width is four whatever the depth. Ties go to the lowest tiling and candidate index, so
/// the plan is deterministic. [`Dp::report`] gives the order, its width and whether the
/// plan is exact (`plan --json` and `explain` show it).
///
/// # Fallback
/// Tables are capped at [`MAX_TABLE_ENTRIES`](crate::MAX_TABLE_ENTRIES) entries. A graph
/// whose order needs larger ones is eliminated in mini-buckets, which yields a lower bound
/// on the optimum and a plan; the plan is then the cheaper of that one and the tree-cut DP's:
/// the graph cut at every edge out of an operator whose outputs go to several operators,
/// each tree optimised one at a time, the largest first, seeing the choices of the trees
/// before it (an input produced in a fixed tree pays the repartition from the fixed tiling;
/// a root pays the repartitions its fixed consumers would incur), then up to four sweeps in
/// which each tree is optimised again with all the others fixed, its new choices kept when
/// they lower the cost of the operators they touch. The report then states the gap bound,
/// the plan's total over the lower bound, instead of exactness.
///
/// # Memory budget
/// Without a [`memory_budget`](Problem::memory_budget) the above is the whole strategy.
/// With one, the plan's resident bytes ([`Problem::resident_bytes`]) are a sum of one term
/// per operator, like its cost, so the DP minimises the Lagrangian `total + λ·resident`
/// unchanged (each candidate's cost gains `λ·resident_bytes`):
/// - `λ = 0` is the unconstrained DP; when its plan fits it is returned as is, so the
///   budget changes nothing (and the plan stays the exact optimum);
/// - otherwise `λ` grows geometrically from `total / excess bytes` until the plan fits,
///   then is bisected geometrically between the last misfit and the first fit (at most
///   40 DP runs in all); every plan that fits is kept, and so are the unconstrained plan
///   and the three misfits of the largest λ, [repaired](Problem::repair);
/// - finally the three cheapest are improved by a bounded local search (single switches,
///   joint switches of the two ends of an edge, and trades of memory between two
///   operators, each taken when the plan stays within budget and gets cheaper), and the
///   cheapest result is the plan.
///
/// The budgeted search is a heuristic. Measured against the ILP's exact budgeted optimum on
/// 1,377 random problems of 6–13 operators on 2–8 devices (`measure_the_dp_gap` in `tests/memory.rs`,
/// budgets drawn between the least resident plan and the unconstrained DP's; PCG64 draws,
/// seed 2026, with the `time` model's pairwise repartition costs): on trees the DP's plan was
/// never more than 9.1 % dearer (35 of 708 dearer at all), on DAGs at most 9.5 % (21 of 669;
/// 25.0 % and 157 of 652 when the search cut DAGs into trees). Without a budget the two agree
/// on every one. A budget below [`min_resident_bytes`](Problem::min_resident_bytes) is
/// [`Error::DoesNotFit`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Dp;

impl LogicalOptimizer for Dp {
    fn name(&self) -> &str {
        "dp"
    }

    fn solve(&self, problem: &Problem) -> Result<Vec<usize>> {
        let search = Search::new(problem, MAX_TABLE_ENTRIES)?;
        match problem.memory_budget {
            None => Ok(search.run(0.0).choice),
            Some(budget) => self.solve_within(&search, budget),
        }
    }

    /// The plan with the elimination's order, width and exactness.
    fn solve_reported(&self, problem: &Problem) -> Result<(Vec<usize>, Option<SearchReport>)> {
        let search = Search::new(problem, MAX_TABLE_ENTRIES)?;
        match problem.memory_budget {
            None => Ok((search.run(0.0).choice, Some(search.report()))),
            Some(budget) => Ok((self.solve_within(&search, budget)?, Some(search.report()))),
        }
    }

    /// The costliest operator groups' other specs, each forced and the rest optimized again
    /// ([`forced_alternatives`](crate::forced_alternatives)).
    fn alternatives(&self, problem: &Problem, choice: &[usize], limit: usize) -> Result<Vec<Vec<usize>>> {
        crate::forced_alternatives(self, problem, choice, limit)
    }
}

/// The most DP runs the budgeted search makes (besides the unconstrained one).
const MAX_RUNS: usize = 40;

/// How many of the cheapest fitting plans the budgeted search improves by local search.
const IMPROVED: usize = 3;

/// How many of the plans that do not fit (those of the largest λ) the budgeted search
/// repairs, besides the unconstrained plan.
const REPAIRED: usize = 3;

impl Dp {
    /// The unconstrained DP's choice (the problem's memory budget is ignored) together with
    /// its total, which equals `problem.total` of the choice up to rounding.
    pub fn solve_with_total(&self, problem: &Problem) -> Result<(Vec<usize>, f64)> {
        let outcome = Search::new(problem, MAX_TABLE_ENTRIES)?.run(0.0);
        Ok((outcome.choice, outcome.objective))
    }

    /// How the search went on `problem` without a memory budget: the elimination order, its
    /// width, and whether the plan is the exact optimum (else a bound on its gap).
    pub fn report(problem: &Problem) -> Result<SearchReport> {
        Ok(Search::new(problem, MAX_TABLE_ENTRIES)?.report())
    }

    /// The budgeted search (see the type's doc, "Memory budget").
    fn solve_within(&self, search: &Search<'_>, budget: f64) -> Result<Vec<usize>> {
        let problem = search.problem;
        problem.check_min_fits()?;
        let free = search.run(0.0).choice;
        if problem.fits(&free) {
            return Ok(free);
        }
        // Every plan that fits, by total (the few cheapest are improved by local search at
        // the end), and the plans that do not, by their λ (the few nearest the budget are
        // repaired: repairing is dearer than a DP run).
        let mut fitting: Vec<(f64, Vec<usize>)> = Vec::new();
        let mut misfits: Vec<(f64, Vec<usize>)> = vec![(0.0, free.clone())];
        let mut keep = |lambda: f64| -> Result<bool> {
            let choice = search.run(lambda).choice;
            if !problem.fits(&choice) {
                misfits.push((lambda, choice));
                return Ok(false);
            }
            if !fitting.iter().any(|(_, c)| *c == choice) {
                fitting.push((problem.total(&choice)?, choice));
            }
            Ok(true)
        };
        // λ prices a byte: start where shedding all the excess bytes is worth the whole cost.
        let excess = problem.resident_bytes(&free) - problem.min_resident_bytes();
        let scale = problem.total(&free)?.max(f64::MIN_POSITIVE) / excess.max(1.0);
        let (mut lo, mut hi) = (0.0, scale);
        let mut runs = 0;
        let mut found = false;
        while runs < MAX_RUNS && !found {
            runs += 1;
            found = keep(hi)?;
            if !found {
                lo = hi;
                hi *= 16.0;
            }
        }
        while found && runs < MAX_RUNS && (lo == 0.0 || hi > lo * (1.0 + 1e-6)) {
            runs += 1;
            let mid = if lo == 0.0 { hi / 16.0 } else { (lo * hi).sqrt() };
            if keep(mid)? {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        misfits.sort_by(|a, b| b.0.total_cmp(&a.0));
        misfits.dedup_by(|a, b| a.1 == b.1);
        let nearest = misfits.iter().take(REPAIRED).chain(misfits.last().filter(|_| misfits.len() > REPAIRED));
        for (_, choice) in nearest {
            let repaired = problem.repair(choice);
            if problem.fits(&repaired) && !fitting.iter().any(|(_, c)| *c == repaired) {
                fitting.push((problem.total(&repaired)?, repaired));
            }
        }
        // Unreachable when the least plan fits (repair then always succeeds); kept total.
        if fitting.is_empty() {
            fitting.push((0.0, problem.repair(&problem.min_resident_choice())));
        }
        fitting.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut best: Option<(f64, Vec<usize>)> = None;
        for (_, start) in fitting.into_iter().take(IMPROVED) {
            let improved = crate::switch::improve(problem, start, budget);
            let total = problem.total(&improved)?;
            if best.as_ref().is_none_or(|(b, _)| total < *b) {
                best = Some((total, improved));
            }
        }
        Ok(best.map(|(_, c)| c).unwrap_or_default())
    }

    /// The trees the graph is cut into, in the order they are optimised; each lists its
    /// operators (indices into [`Problem::ops`]) in increasing order, its root last.
    pub fn trees(problem: &Problem) -> Result<Vec<Vec<usize>>> {
        Ok(Shape::of(problem)?.trees)
    }
}

/// The search of one problem: variable elimination, with the tree-cut DP beside it for
/// problems whose tables had to be relaxed.
struct Search<'p> {
    problem: &'p Problem,
    shape: Shape,
    /// The tree-cut DP's tables, built when it first runs.
    tables: OnceCell<Tables>,
    elimination: Elimination<'p>,
}

/// One run of the search.
struct Outcome {
    choice: Vec<usize>,
    /// `total + λ · resident` of `choice`.
    objective: f64,
    /// A lower bound on that objective over every plan (`objective` itself when exact).
    lower: f64,
}

impl<'p> Search<'p> {
    /// The search of `problem` with tables of at most `limit` entries.
    fn new(problem: &'p Problem, limit: usize) -> Result<Search<'p>> {
        let shape = Shape::of(problem)?;
        Ok(Search { problem, shape, tables: OnceCell::new(), elimination: Elimination::new(problem, limit) })
    }

    /// The elimination's order, width and exactness, and, where elimination was relaxed, the
    /// gap bound of the run without a budget (run again for it: relaxed problems are rare).
    fn report(&self) -> SearchReport {
        let elimination = &self.elimination;
        let gap_bound = (!elimination.exact()).then(|| {
            let free = self.run(0.0);
            if free.lower > 0.0 {
                ((free.objective - free.lower) / free.lower).max(0.0)
            } else if free.objective <= 0.0 {
                0.0
            } else {
                f64::INFINITY
            }
        });
        SearchReport {
            method: "variable elimination".into(),
            order: elimination.order_names(),
            width: elimination.width(),
            largest_table: elimination.largest_table(),
            exact: elimination.exact(),
            gap_bound,
        }
    }

    /// The plan minimising `total + lambda · resident bytes`: the exact optimum when no table
    /// was relaxed, else the cheaper of the relaxed elimination's plan and the tree-cut DP's.
    fn run(&self, lambda: f64) -> Outcome {
        let solved = self.elimination.solve(lambda);
        if solved.exact {
            debug_assert!(
                self.problem
                    .total(&solved.choice)
                    .is_ok_and(|t| close(t + lambda * self.problem.resident_bytes(&solved.choice), solved.bound)),
                "the elimination's optimum {} differs from its plan's total {:?} (λ = {lambda})",
                solved.bound,
                self.problem.total(&solved.choice)
            );
            return Outcome { choice: solved.choice, objective: solved.bound, lower: solved.bound };
        }
        let objective = |choice: &[usize]| {
            self.problem.total(choice).map_or(f64::INFINITY, |t| t + lambda * self.problem.resident_bytes(choice))
        };
        let relaxed = objective(&solved.choice);
        let tables = self.tables.get_or_init(|| Tables::of(self.problem));
        let (cut, cut_objective) = tree_cut(self.problem, &self.shape, tables, lambda);
        let (choice, objective) =
            if cut_objective <= relaxed { (cut, cut_objective) } else { (solved.choice, relaxed) };
        Outcome { choice, objective, lower: solved.bound.min(objective) }
    }
}

/// The tree-cut DP minimising `total + lambda · resident bytes`: its choice and that
/// objective (see [`Dp`], "Fallback").
fn tree_cut(problem: &Problem, shape: &Shape, tables: &Tables, lambda: f64) -> (Vec<usize>, f64) {
    let n = problem.ops.len();
    let mut fixed: Vec<Option<usize>> = vec![None; n];
    let mut opt: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut best: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut total = 0.0;
    for tree in &shape.trees {
        total += solve_tree(problem, shape, tables, tree, lambda, &mut fixed, &mut opt, &mut best);
    }
    // Sweeps: each tree optimised again with every other tree fixed, both its producers and
    // its consumers; its new choice is kept when it lowers the cost of the operators it
    // touches (its own and their readers), so the total never rises.
    if shape.trees.len() > 1 {
        let readers = problem.readers();
        let local = |fixed: &[Option<usize>], tree: &[usize], affected: &[usize]| {
            let choice: Vec<usize> = fixed.iter().map(|c| c.unwrap_or(0)).collect();
            let resident: f64 = tree.iter().map(|&o| problem.ops[o].candidates[choice[o]].resident_bytes).sum();
            problem.local_cost(&choice, affected) + lambda * resident
        };
        for _ in 0..MAX_SWEEPS {
            let mut changed = false;
            for tree in &shape.trees {
                let affected = problem.affected(&readers, tree);
                let before = local(&fixed, tree, &affected);
                let kept: Vec<Option<usize>> = tree.iter().map(|&o| fixed[o].take()).collect();
                solve_tree(problem, shape, tables, tree, lambda, &mut fixed, &mut opt, &mut best);
                if local(&fixed, tree, &affected) < before {
                    changed = true;
                } else {
                    for (&o, k) in tree.iter().zip(kept) {
                        fixed[o] = k;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        let choice: Vec<usize> = fixed.iter().map(|c| c.unwrap_or(0)).collect();
        total = problem.total(&choice).map_or(f64::INFINITY, |t| t + lambda * problem.resident_bytes(&choice));
    }
    let choice: Vec<usize> = fixed.into_iter().map(|c| c.unwrap_or(0)).collect();
    debug_assert!(
        problem.total(&choice).is_ok_and(|t| close(t + lambda * problem.resident_bytes(&choice), total)),
        "the DP's total {total} differs from the plan's {:?} (λ = {lambda})",
        problem.total(&choice)
    );
    (choice, total)
}

/// The most sweeps of tree-by-tree re-optimisation after the first pass (see [`Dp`]).
const MAX_SWEEPS: usize = 4;

/// True when two totals agree up to floating-point rounding of different summation orders.
fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// A producer inside the consumer's tree, with the `(input slot, output)` pairs it feeds.
#[derive(Clone, Debug)]
struct Child {
    op: usize,
    feeds: Vec<(usize, usize)>,
}

/// The forest the graph is cut into.
#[derive(Clone, Debug)]
struct Shape {
    /// Per operator: the operator that reads all of its outputs, when there is exactly one.
    parent: Vec<Option<usize>>,
    /// Per operator: its producers inside its tree.
    children: Vec<Vec<Child>>,
    /// Per operator: `(consumer, input slot, output)` for every edge out of it.
    out_edges: Vec<Vec<(usize, usize, usize)>>,
    /// The trees, in optimisation order, each in increasing operator order.
    trees: Vec<Vec<usize>>,
}

impl Shape {
    fn of(problem: &Problem) -> Result<Shape> {
        let ops = &problem.ops;
        let n = ops.len();
        let malformed = |msg: String| Err(Error::InvalidPlan(format!("malformed problem: {msg}")));
        let outputs: Vec<usize> = ops.iter().map(|o| o.candidates.first().map_or(0, |c| c.outputs.len())).collect();
        for (c, op) in ops.iter().enumerate() {
            if op.candidates.is_empty() {
                return malformed(format!("{} has no candidate spec", op.name));
            }
            if op.repartition.len() != op.sources.len() {
                return malformed(format!(
                    "{}: {} repartition costs for {} inputs",
                    op.name,
                    op.repartition.len(),
                    op.sources.len()
                ));
            }
            if op.candidates.iter().any(|k| k.inputs.len() != op.sources.len() || k.outputs.len() != outputs[c]) {
                return malformed(format!("{}: candidates disagree on the number of inputs or outputs", op.name));
            }
            for src in &op.sources {
                if let Source::Op { op: p, output } = *src
                    && (p >= c || output >= outputs[p])
                {
                    return malformed(format!("{} reads output {output} of operator {p}", op.name));
                }
            }
        }
        let mut out_edges: Vec<Vec<(usize, usize, usize)>> = vec![Vec::new(); n];
        for (c, op) in ops.iter().enumerate() {
            for (k, src) in op.sources.iter().enumerate() {
                if let Source::Op { op: p, output } = *src {
                    out_edges[p].push((c, k, output));
                }
            }
        }
        let parent: Vec<Option<usize>> = out_edges
            .iter()
            .map(|edges| match edges.split_first() {
                Some((&(c, _, _), rest)) if rest.iter().all(|&(d, _, _)| d == c) => Some(c),
                _ => None,
            })
            .collect();
        let mut children: Vec<Vec<Child>> = vec![Vec::new(); n];
        for (p, edges) in out_edges.iter().enumerate() {
            if let Some(c) = parent[p] {
                children[c].push(Child { op: p, feeds: edges.iter().map(|&(_, k, j)| (k, j)).collect() });
            }
        }
        // The root of every operator: parents come later in topological order.
        let mut root: Vec<usize> = (0..n).collect();
        for op in (0..n).rev() {
            if let Some(c) = parent[op] {
                root[op] = root[c];
            }
        }
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); n];
        for op in 0..n {
            members[root[op]].push(op);
        }
        let elements: Vec<f64> = ops.iter().map(output_elements).collect();
        let mut trees: Vec<(usize, f64, usize, Vec<usize>)> = members
            .into_iter()
            .enumerate()
            .filter(|(_, m)| !m.is_empty())
            .map(|(r, m)| (m.len(), m.iter().map(|&o| elements[o]).sum(), r, m))
            .collect();
        trees.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.total_cmp(&a.1)).then(a.2.cmp(&b.2)));
        Ok(Shape { parent, children, out_edges, trees: trees.into_iter().map(|t| t.3).collect() })
    }
}

/// The elements of every output of an operator (its first candidate's output blocks tile
/// each output, so their volumes add up to the output's).
fn output_elements(op: &OpProblem) -> f64 {
    op.candidates.first().map_or(0.0, |c| {
        (0..c.outputs.len()).map(|j| c.spec.output_blocks(j).iter().map(|b| b.volume() as f64).sum::<f64>()).sum()
    })
}

/// Per operator, the DP table's layout: one entry per distinct tuple of output tilings.
#[derive(Clone, Debug)]
struct Tables {
    /// Per operator, per candidate: its entry.
    entry_of: Vec<Vec<usize>>,
    /// Per operator: the output tilings of every entry, flattened (`entry · outputs + j`).
    tilings: Vec<Vec<TilingId>>,
    /// Per operator: its number of outputs.
    outputs: Vec<usize>,
    /// Per operator: its number of entries.
    entries: Vec<usize>,
    /// Per operator: its candidate list's address, which equal operators share.
    candidates: Vec<usize>,
    /// Repartition costs from every entry of a producer to one tiling a consumer needs,
    /// computed on first use and shared by the equal edges of a stack's layers (see
    /// [`Tables::repartitions`]).
    moves: RefCell<HashMap<MoveKey, Rc<[f64]>>>,
}

/// What a vector of [`Tables::moves`] depends on: the producer's candidate list and output,
/// the consumer input's priced pairs and fallback cost, and the tiling it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct MoveKey {
    candidates: usize,
    output: usize,
    pairs: usize,
    fallback: u64,
    need: TilingId,
}

impl Tables {
    fn of(problem: &Problem) -> Tables {
        let mut entry_of = Vec::with_capacity(problem.ops.len());
        let mut tilings = Vec::with_capacity(problem.ops.len());
        let mut outputs = Vec::with_capacity(problem.ops.len());
        let mut counts = Vec::with_capacity(problem.ops.len());
        for op in &problem.ops {
            let width = op.candidates.first().map_or(0, |c| c.outputs.len());
            let mut index: HashMap<&[TilingId], usize> = HashMap::new();
            let mut flat = Vec::new();
            let entries = op
                .candidates
                .iter()
                .map(|cand| {
                    let next = index.len();
                    *index.entry(&cand.outputs).or_insert_with(|| {
                        flat.extend_from_slice(&cand.outputs);
                        next
                    })
                })
                .collect();
            entry_of.push(entries);
            tilings.push(flat);
            outputs.push(width);
            counts.push(index.len());
        }
        let candidates =
            problem.ops.iter().map(|op| Arc::as_ptr(&op.candidates) as *const Candidate as usize).collect();
        Tables { entry_of, tilings, outputs, entries: counts, candidates, moves: RefCell::default() }
    }

    /// The cost of repartitioning output `j` of `producer`, in each of its entries' tilings,
    /// into the tiling `need` that input `k` of `consumer` needs.
    fn repartitions(&self, producer: usize, j: usize, consumer: &OpProblem, k: usize, need: TilingId) -> Rc<[f64]> {
        let pairs = consumer.repartition_pairs.get(k).and_then(Option::as_ref);
        let key = MoveKey {
            candidates: self.candidates[producer],
            output: j,
            pairs: pairs.map_or(0, |p| Arc::as_ptr(p) as usize),
            fallback: consumer.repartition[k].to_bits(),
            need,
        };
        if let Some(moves) = self.moves.borrow().get(&key) {
            return Rc::clone(moves);
        }
        let width = self.outputs[producer];
        let tilings = &self.tilings[producer];
        let moves: Rc<[f64]> =
            (0..self.entries[producer]).map(|e| consumer.repartition_cost(k, tilings[e * width + j], need)).collect();
        self.moves.borrow_mut().insert(key, Rc::clone(&moves));
        moves
    }
}

/// The cheapest entry of child `child` for a consumer `op` whose candidate needs the input
/// tilings `needs`: `(cost, entry)`, ties to the lowest entry.
fn child_term(tables: &Tables, opt: &[Vec<f64>], child: &Child, needs: &[TilingId], op: &OpProblem) -> (f64, usize) {
    let moves: Vec<Rc<[f64]>> =
        child.feeds.iter().map(|&(k, j)| tables.repartitions(child.op, j, op, k, needs[k])).collect();
    let mut best = (f64::INFINITY, 0);
    for (e, &base) in opt[child.op].iter().enumerate() {
        let cost = base + moves.iter().map(|m| m[e]).sum::<f64>();
        if cost < best.0 {
            best = (cost, e);
        }
    }
    best
}

/// Fills the tables of one tree, fixes its operators' choices, and returns its cost (each
/// candidate's cost raised by `lambda` times its resident bytes).
#[allow(clippy::too_many_arguments)]
fn solve_tree(
    problem: &Problem,
    shape: &Shape,
    tables: &Tables,
    tree: &[usize],
    lambda: f64,
    fixed: &mut [Option<usize>],
    opt: &mut [Vec<f64>],
    best: &mut [Vec<usize>],
) -> f64 {
    let mut root_best = (f64::INFINITY, 0);
    for &c in tree {
        let op = &problem.ops[c];
        // Inputs produced in already-fixed trees: (slot, the fixed producer's tiling).
        let fixed_inputs: Vec<(usize, TilingId)> = op
            .sources
            .iter()
            .enumerate()
            .filter_map(|(k, src)| match *src {
                Source::Op { op: p, output } if shape.parent[p] != Some(c) => {
                    fixed[p].map(|cp| (k, problem.ops[p].candidates[cp].outputs[output]))
                }
                _ => None,
            })
            .collect();
        // Edges to already-fixed consumers (only a root has edges out of its tree):
        // (output, the tiling the consumer needs, the consumer, its input slot).
        let fixed_consumers: Vec<(usize, TilingId, &OpProblem, usize)> = if shape.parent[c].is_none() {
            shape.out_edges[c]
                .iter()
                .filter_map(|&(d, k, j)| {
                    fixed[d].map(|cd| (j, problem.ops[d].candidates[cd].inputs[k], &problem.ops[d], k))
                })
                .collect()
        } else {
            Vec::new()
        };
        let entries = tables.entries[c];
        let mut table = vec![f64::INFINITY; entries];
        let mut chosen = vec![0; entries];
        for (n, cand) in op.candidates.iter().enumerate() {
            let mut b = cand.cost.total();
            if lambda > 0.0 {
                b += lambda * cand.resident_bytes;
            }
            for &(k, tiling) in &fixed_inputs {
                b += op.repartition_cost(k, tiling, cand.inputs[k]);
            }
            for &(j, need, consumer, k) in &fixed_consumers {
                b += consumer.repartition_cost(k, cand.outputs[j], need);
            }
            for child in &shape.children[c] {
                b += child_term(tables, opt, child, &cand.inputs, op).0;
            }
            let e = tables.entry_of[c][n];
            if b < table[e] {
                table[e] = b;
                chosen[e] = n;
            }
            if shape.parent[c].is_none() && b < root_best.0 {
                root_best = (b, n);
            }
        }
        opt[c] = table;
        best[c] = chosen;
    }
    // Trace back from the root (the tree's last operator).
    let Some(&root) = tree.last() else { return 0.0 };
    let mut stack = vec![(root, root_best.1)];
    while let Some((c, n)) = stack.pop() {
        fixed[c] = Some(n);
        let op = &problem.ops[c];
        let cand = &op.candidates[n];
        for child in &shape.children[c] {
            let (_, e) = child_term(tables, opt, child, &cand.inputs, op);
            stack.push((child.op, best[child.op][e]));
        }
    }
    root_best.0
}

#[cfg(test)]
mod tests;
