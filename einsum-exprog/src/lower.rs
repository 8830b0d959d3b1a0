//! Lowering a program's closure to an [`einsum_sim`] task DAG: the cost semantics of
//! Section 5.2 of the paper.
//!
//! Every firing of the closure (an action at one of its source sites) becomes at most two
//! tasks:
//!
//! - an **aggregation** at the site, only when the aggregate `X` is not yet materialised
//!   there (neither declared by `IN`, nor delivered, nor formed by an earlier firing at the
//!   site): it reads every piece of the firing's enabling set and writes `X`, through the
//!   site's HBM (read = Σ piece sizes, write = size(`X`));
//! - a **transfer** of size(`X`) bytes to each of the action's destinations other than the
//!   site itself. The transfers of one multicast start together, so where the source's
//!   egress is capped they share it `k` ways; each destination's copy counts as arrived when
//!   its own transfer ends, so a consumer never waits for a slower destination.
//!
//! A task waits for the tasks that materialised its enabling pieces (the closure's
//! dependencies): the producing firing's aggregation (or whatever made `X` present at its
//! source) for a piece at the producer's own site, its transfer for a piece that arrived.
//! Pieces declared by `IN` are there at time zero.
//!
//! Sizes: an aggregate ⊕-combines partial copies of one tensor block, so its size is the size
//! of its atoms (their largest, should they differ), from `IN` in GB of 1e9 bytes.

use std::collections::HashMap;

use einsum_sim::{GB, SimGraph, SimTask, SimTaskId};

use crate::aggregate::Aggregate;
use crate::closure::{Closure, Producer};
use crate::ids::SiteId;
use crate::program::{DEFAULT_SIZE_GB, Program};

/// The tasks one firing became (indices into [`Lowering::graph`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FiringTasks {
    /// The aggregation that formed the aggregate at the firing's site, if it was not already
    /// materialised there.
    pub aggregate: Option<SimTaskId>,
    /// The task after which the aggregate is present at the firing's site: the aggregation,
    /// or the task that delivered it earlier (`None`: present from the start).
    pub ready: Option<SimTaskId>,
    /// The transfer to each destination, in destination order.
    pub transfers: Vec<(SiteId, SimTaskId)>,
}

impl FiringTasks {
    /// The task after which the aggregate is present at `site` (a destination or the
    /// firing's own site).
    pub fn arrival(&self, site: SiteId) -> Option<SimTaskId> {
        self.transfers.iter().find(|(d, _)| *d == site).map(|(_, t)| *t).or(self.ready)
    }
}

/// A closure lowered to a task DAG.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Lowering {
    /// The tasks, ready for [`einsum_sim::simulate`].
    pub graph: SimGraph,
    /// The tasks of every firing, indexed like [`Closure::firings`].
    pub firings: Vec<FiringTasks>,
}

impl Program {
    /// Bytes of an aggregate: [`Program::aggregate_gb`] in bytes.
    pub fn aggregate_bytes(&self, aggregate: &Aggregate) -> f64 {
        self.aggregate_gb(aggregate) * GB
    }

    /// GB of an aggregate: the size of its atoms (the largest, if they differ) as `IN`
    /// declares them; an atom `IN` does not declare counts as [`DEFAULT_SIZE_GB`].
    pub fn aggregate_gb(&self, aggregate: &Aggregate) -> f64 {
        aggregate.atoms().iter().map(|a| self.inputs.get(a).map_or(DEFAULT_SIZE_GB, |i| i.size_gb)).fold(0.0, f64::max)
    }
}

/// Lowers `closure` (a closure of `program`, under any membership) to a task DAG; see the
/// module docs for the cost semantics. Sites are used as simulator sites unchanged.
pub fn lower(program: &Program, closure: &Closure) -> Lowering {
    let mats = closure.materializations();
    let firings = closure.firings();
    let mut graph = SimGraph::new();
    let mut tasks: Vec<FiringTasks> = Vec::with_capacity(firings.len());
    // Aggregates already formed at a site by an earlier firing, with the forming task.
    let mut formed_at: HashMap<(SiteId, &Aggregate), SimTaskId> = HashMap::new();
    for f in firings {
        // The task after which each piece is present at the firing's site.
        let mut deps: Vec<SimTaskId> = f
            .pieces
            .iter()
            .filter_map(|&m| {
                let mat = mats.get(m)?;
                match mat.producer {
                    Producer::Input(_) => None,
                    Producer::Firing(k) => tasks.get(k)?.arrival(mat.site),
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
        } else if let Some(&earlier) = formed_at.get(&(f.site, aggregate)) {
            (None, Some(earlier))
        } else {
            let read: f64 =
                f.pieces.iter().filter_map(|&m| mats.get(m)).map(|m| program.aggregate_bytes(&m.aggregate)).sum();
            let label = format!("{aggregate} @ {}", f.site);
            let id = graph.push(SimTask::aggregate(label, f.site, read, bytes).after(deps));
            formed_at.insert((f.site, aggregate), id);
            (Some(id), Some(id))
        };
        let transfers = f
            .action
            .dests
            .iter()
            .filter(|&&d| d != f.site)
            .map(|&d| {
                let label = format!("{aggregate} @ {} -> {d}", f.site);
                (d, graph.push(SimTask::transfer(label, f.site, d, bytes).after(ready)))
            })
            .collect();
        tasks.push(FiringTasks { aggregate: formed, ready, transfers });
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
        // One aggregation at 0, one transfer to 1, one transfer each to 2 and 3.
        assert_eq!(l.graph.len(), 4, "{:?}", l.graph);
        let first = l.firings[0].transfers[0].1;
        let relay = &l.firings[1];
        assert_eq!(relay.aggregate, None);
        assert_eq!(relay.ready, Some(first));
        assert_eq!(relay.transfers.len(), 2);
        for (_, t) in &relay.transfers {
            assert_eq!(l.graph.tasks()[t.0].deps, vec![first]);
        }
        // the local action at 2 is a no-op that waits for the transfer to 2 only
        let to_2 = relay.arrival(SiteId(2));
        assert_eq!(l.firings[2], FiringTasks { aggregate: None, ready: to_2, transfers: vec![] });
    }

    #[test]
    fn an_aggregate_formed_twice_at_one_site_is_aggregated_once() {
        // Two actions form A+B at 0 in the same round; the second reuses the first's result.
        let p: Program = "IN: A @ 0; B @ 0\nA+B @ 0 -> 1\nA+B @ 0 -> 2".parse().unwrap();
        let c = p.closure(&Membership::default()).unwrap();
        let l = lower(&p, &c);
        let aggregations = l.graph.tasks().iter().filter(|t| matches!(t.kind, TaskKind::Aggregate { .. })).count();
        assert_eq!(aggregations, 1);
    }

    #[test]
    fn a_destination_waits_only_for_its_own_copy() {
        let p: Program = "IN: A @ 0\nA @ 0 -> 1, 3\nA @ 3 -> 7".parse().unwrap();
        let c = p.closure(&Membership::default()).unwrap();
        let l = lower(&p, &c);
        let to_3 = l.firings[0].arrival(SiteId(3)).unwrap();
        let onward = l.firings[1].transfers[0].1;
        assert_eq!(l.graph.tasks()[onward.0].deps, vec![to_3]);
    }
}
