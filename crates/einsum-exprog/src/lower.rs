//! Lowering a program's closure to an [`einsum_sim`] task DAG: the cost semantics of
//! Section 5.2 (DESIGN.md, "Exchange programs and the simulator").
//!
//! Every firing of the closure (an action at one of its source sites) becomes at most two
//! tasks:
//!
//! - an **aggregation** at the site, only when the aggregate `X` is not yet materialised
//!   there: it reads every piece of the firing's enabling set and writes `X`, through the
//!   site's HBM (read = Σ piece sizes, write = size(`X`));
//! - a **transfer** of size(`X`) bytes to the action's destinations: one multicast task (a
//!   plain transfer for one destination), which the simulator splits into one flow per
//!   destination, so a multicast to `k` sites shares the source's egress `k` ways. It ends when
//!   the last destination has everything, and that is when the aggregate counts as arrived.
//!
//! A task waits for the tasks that materialised its enabling pieces (the closure's
//! dependencies): the producing firing's aggregation (or whatever made `X` present at its
//! source) for a piece at the producer's own site, its transfer for a piece that arrived.
//! Pieces declared by `IN` are there at time zero.
//!
//! Sizes: an aggregate ⊕-combines partial copies of one tensor block, so its size is the size
//! of its atoms (their largest, should they differ), from `IN` in GB of 1e9 bytes.

use einsum_sim::{GB, Task, TaskGraph, TaskId};

use crate::aggregate::Aggregate;
use crate::closure::{Closure, Producer};
use crate::ids::SiteId;
use crate::program::{DEFAULT_SIZE_GB, Program};

/// The tasks one firing became (indices into [`Lowering::graph`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FiringTasks {
    /// The aggregation that formed the aggregate at the firing's site, if it was not already
    /// materialised there.
    pub aggregate: Option<TaskId>,
    /// The task after which the aggregate is present at the firing's site: the aggregation,
    /// or the task that delivered it earlier (`None`: present from the start).
    pub ready: Option<TaskId>,
    /// The transfer or multicast to the destinations, if any.
    pub transfer: Option<TaskId>,
}

/// A closure lowered to a task DAG.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Lowering {
    /// The tasks, ready for [`einsum_sim::simulate`].
    pub graph: TaskGraph,
    /// The tasks of every firing, indexed like [`Closure::firings`].
    pub firings: Vec<FiringTasks>,
}

/// Converts an ExProg site to a simulator site.
pub(crate) fn sim_site(site: SiteId) -> einsum_sim::SiteId {
    einsum_sim::SiteId(site.0 as usize)
}

impl Program {
    /// Bytes of an aggregate: the size of its atoms (the largest, if they differ) as `IN`
    /// declares them; an atom `IN` does not declare counts as [`DEFAULT_SIZE_GB`].
    pub fn aggregate_bytes(&self, aggregate: &Aggregate) -> f64 {
        let gb = aggregate
            .atoms()
            .iter()
            .map(|a| self.inputs.get(a).map_or(DEFAULT_SIZE_GB, |i| i.size_gb))
            .fold(0.0, f64::max);
        gb * GB
    }
}

/// Lowers `closure` (a closure of `program`, under any membership) to a task DAG; see the
/// module docs for the cost semantics. Sites are used as simulator sites unchanged.
pub fn lower(program: &Program, closure: &Closure) -> Lowering {
    let mats = closure.materializations();
    let firings = closure.firings();
    let mut graph = TaskGraph::new();
    let mut tasks: Vec<FiringTasks> = Vec::with_capacity(firings.len());
    for f in firings {
        // The task after which each piece is present at the firing's site.
        let mut deps: Vec<TaskId> = f
            .pieces
            .iter()
            .filter_map(|&m| {
                let mat = mats.get(m)?;
                match mat.producer {
                    Producer::Input(_) => None,
                    Producer::Firing(k) => {
                        let (producer, done) = (firings.get(k)?, tasks.get(k)?);
                        if mat.site == producer.site { done.ready } else { done.transfer }
                    }
                }
            })
            .collect();
        deps.sort_unstable();
        deps.dedup();
        let aggregate = &f.action.aggregate;
        let bytes = program.aggregate_bytes(aggregate);
        let present = f.pieces.len() == 1 && mats.get(f.pieces[0]).is_some_and(|m| &m.aggregate == aggregate);
        let (formed, ready) = if present {
            (None, deps.first().copied())
        } else {
            let read: f64 =
                f.pieces.iter().filter_map(|&m| mats.get(m)).map(|m| program.aggregate_bytes(&m.aggregate)).sum();
            let label = format!("{aggregate} @ {}", f.site);
            let id = graph.push(Task::aggregate(label, sim_site(f.site), read, bytes).after(deps));
            (Some(id), Some(id))
        };
        let transfer = if f.action.dests.is_empty() {
            None
        } else {
            let dests: Vec<String> = f.action.dests.iter().map(ToString::to_string).collect();
            let label = format!("{aggregate} @ {} -> {}", f.site, dests.join(", "));
            let src = sim_site(f.site);
            let task = match f.action.dests.iter().collect::<Vec<_>>().as_slice() {
                [only] => Task::transfer(label, src, sim_site(**only), bytes),
                many => Task::multicast(label, src, many.iter().map(|d| sim_site(**d)).collect(), bytes),
            };
            Some(graph.push(task.after(ready)))
        };
        tasks.push(FiringTasks { aggregate: formed, ready, transfer });
    }
    Lowering { graph, firings: tasks }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::Membership;
    use einsum_sim::TaskKind;

    #[test]
    fn swap_lowers_to_two_transfers_and_two_aggregations() {
        let p: Program =
            "IN: A @ 0; B @ 1 (size: 0.5 GB)\nOUT: A+B @ 0, 1\nA @ 0 -> 1\nB @ 1 -> 0\nA+B @ 0, 1".parse().unwrap();
        let c = p.closure(&Membership::default()).unwrap();
        let l = lower(&p, &c);
        let kinds: Vec<&TaskKind> = l.graph.tasks().iter().map(|t| &t.kind).collect();
        assert_eq!(kinds.len(), 4);
        let aggs: Vec<(f64, f64)> = kinds
            .iter()
            .filter_map(|k| match k {
                TaskKind::Aggregate { read_bytes, write_bytes, .. } => Some((*read_bytes, *write_bytes)),
                _ => None,
            })
            .collect();
        // A+B has the size of its largest atom; reading both pieces costs 1.5 GB.
        assert_eq!(aggs, vec![(1.5 * GB, GB), (1.5 * GB, GB)]);
        // each aggregation waits for the transfer that brought the other atom
        for t in l.graph.tasks() {
            if matches!(t.kind, TaskKind::Aggregate { .. }) {
                assert_eq!(t.deps.len(), 1);
                assert!(l.graph.tasks()[t.deps[0].0].kind.is_transfer());
            }
        }
    }

    #[test]
    fn forwarding_an_aggregate_already_present_does_not_aggregate_again() {
        let p: Program = "IN: A @ 0; B @ 0\nA+B @ 0 -> 1\nA+B @ 1 -> 2, 3\nA+B @ 2".parse().unwrap();
        let c = p.closure(&Membership::default()).unwrap();
        let l = lower(&p, &c);
        assert_eq!(l.graph.len(), 3, "{:?}", l.graph);
        let relay = &l.firings[1];
        assert_eq!(relay.aggregate, None);
        assert_eq!(relay.ready, l.firings[0].transfer);
        let t = &l.graph.tasks()[relay.transfer.unwrap().0];
        assert!(matches!(&t.kind, TaskKind::Multicast { dsts, .. } if dsts.len() == 2));
        assert_eq!(t.deps, vec![l.firings[0].transfer.unwrap()]);
        // the local action at 2 is a no-op
        assert_eq!(l.firings[2], FiringTasks { aggregate: None, ready: relay.transfer, transfer: None });
    }
}
