//! One rank's share of a task graph run over the ranks of a multi-process job: the graph's
//! tasks reordered so that this rank's work comes in the order it must be issued, and what
//! every task is to the rank ([`Role`]).
//!
//! # Design
//! NCCL pairs a rank's sends and receives in the order both post them, and a step's
//! operations must be posted as one group ([`crate::exchange_steps`]), so a rank issues its
//! tasks and its steps in [`issue_order`], not in the graph's schedule order. Rather than teach
//! the stream, pool and resident planners, the lowering, the executor, the emulator and the race
//! checker a second order, the rank gets a copy of the graph whose schedule order *is* its
//! issue order: every task of the graph (the same buffers, with the same ids), this rank's in
//! its issue order with each step's sends and receives one after the other (in task order),
//! and every other rank's task as early as its dependencies allow. Those others' tasks are
//! [`Role::Remote`]: they issue nothing and their buffers take no memory here. A transfer
//! between devices of two ranks is [`Role::Send`] on the source's rank and [`Role::Recv`] on
//! the destination's; every other task of the rank's devices is [`Role::Local`].
//!
//! Such an order always exists: a path of dependencies from one of this rank's tasks to
//! another that leaves the rank crosses a send and comes back through a receive of a later
//! step, and the issue order places every local task and step after its local predecessors
//! and the steps in increasing order, so the issue order is consistent with every path
//! through other ranks' tasks too. (A failure here is a bug, reported as [`RankError::Order`].)

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use einsum_core::TensorType;
use einsum_core::taskgraph::{BufferId, DeviceId, Task, TaskGraph, TaskGraphError, TaskId};

use crate::exchange_steps::{Direction, Issue, RankOp, crossing_steps, issue_order};

/// What a task of the job's graph is to one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A task of this rank's devices (a transfer between two of them included).
    Local,
    /// A task of another rank: it issues nothing here.
    Remote,
    /// A transfer from a device of this rank to one of rank `peer`, sent in step `step`.
    Send {
        /// The receiving rank.
        peer: usize,
        /// Its step ([`crate::exchange_steps::crossing_steps`]).
        step: usize,
    },
    /// A transfer to a device of this rank from one of rank `peer`, received in step `step`.
    Recv {
        /// The sending rank.
        peer: usize,
        /// Its step.
        step: usize,
    },
}

impl Role {
    /// The step of a send or receive.
    pub fn step(self) -> Option<usize> {
        match self {
            Role::Send { step, .. } | Role::Recv { step, .. } => Some(step),
            Role::Local | Role::Remote => None,
        }
    }
}

/// Why a rank's schedule could not be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RankError {
    /// The device-to-rank list does not cover the graph's devices.
    #[error("{given} devices are given ranks, but the graph has {devices}")]
    Devices {
        /// Devices given a rank.
        given: usize,
        /// The graph's devices.
        devices: usize,
    },
    /// A device is given to a rank outside the job, or the rank asked for is.
    #[error("rank {rank} is not a rank of a job of {ranks}")]
    Rank {
        /// The rank.
        rank: usize,
        /// The job's ranks.
        ranks: usize,
    },
    /// The issue order left a task whose dependencies never ran (a bug).
    #[error("rank {rank}'s issue order reaches {task} before its dependencies")]
    Order {
        /// The rank.
        rank: usize,
        /// The task.
        task: TaskId,
    },
    /// The reordered graph is malformed (a bug).
    #[error(transparent)]
    Graph(#[from] TaskGraphError),
}

/// One rank's copy of a job's task graph, in its issue order; see the module docs.
#[derive(Clone, Debug)]
pub struct RankSchedule {
    /// The job's graph, reordered (same devices, buffers, inputs and outputs).
    pub graph: TaskGraph,
    /// For every task, its id in the job's graph.
    pub original: Vec<TaskId>,
    /// For every task, what it is to this rank.
    pub roles: Vec<Role>,
    /// For every device, whether it is this rank's.
    pub local_device: Vec<bool>,
    /// This rank.
    pub rank: usize,
    /// The job's ranks.
    pub ranks: usize,
}

impl RankSchedule {
    /// Rank `rank`'s schedule of `graph` in a job of `ranks` ranks where device `d` belongs
    /// to rank `device_rank[d]`.
    pub fn new(graph: &TaskGraph, device_rank: &[usize], rank: usize, ranks: usize) -> Result<Self, RankError> {
        if device_rank.len() != graph.devices() {
            return Err(RankError::Devices { given: device_rank.len(), devices: graph.devices() });
        }
        if let Some(&bad) = device_rank.iter().chain([&rank]).find(|&&r| r >= ranks) {
            return Err(RankError::Rank { rank: bad, ranks });
        }
        let rank_of = |d: DeviceId| device_rank[d.0 as usize];
        let steps = crossing_steps(graph, &rank_of);
        let n = graph.nodes().len();
        // What every task of the job's graph is to this rank.
        let role_of = |t: usize| -> Role {
            let task = &graph.nodes()[t].task;
            if let (Some(step), Task::Transfer { src, dst }) = (steps[t], task) {
                let (from, to) = (rank_of(graph.buffer(*src).device), rank_of(graph.buffer(*dst).device));
                return if from == rank {
                    Role::Send { peer: to, step }
                } else if to == rank {
                    Role::Recv { peer: from, step }
                } else {
                    Role::Remote
                };
            }
            let b = task.written_buffers().first().or(task.read_buffers().first()).copied();
            match b {
                Some(b) if rank_of(graph.buffer(b).device) == rank => Role::Local,
                Some(_) => Role::Remote,
                None => Role::Local,
            }
        };
        let roles: Vec<Role> = (0..n).map(role_of).collect();
        // This rank's tasks in issue order, each step expanded into its operations.
        let mut step_ops: Vec<Vec<usize>> = Vec::new();
        for (t, role) in roles.iter().enumerate() {
            if let Some(step) = role.step() {
                if step_ops.len() <= step {
                    step_ops.resize(step + 1, Vec::new());
                }
                step_ops[step].push(t);
            }
        }
        let mut sequence = Vec::new();
        for issue in issue_order(graph, &rank_of, rank) {
            match issue {
                Issue::Task(t) => sequence.push(t.0 as usize),
                Issue::Step(k) => sequence.extend(step_ops.get(k).into_iter().flatten()),
            }
        }
        let order = merge_order(graph, &roles, &sequence).map_err(|task| RankError::Order { rank, task })?;
        // The copy in that order, with the same buffers (added in the same order, so with the
        // same ids).
        let mut reordered = TaskGraph::new(graph.devices(), graph.inputs().to_vec(), graph.outputs().to_vec());
        for b in graph.buffers() {
            reordered.add_buffer(b.device, b.ty.clone(), b.dtype);
        }
        let mut position = vec![0u32; n];
        for (p, &t) in order.iter().enumerate() {
            position[t] = p as u32;
            let node = &graph.nodes()[t];
            let deps: Vec<TaskId> = node.deps.iter().map(|d| TaskId(position[d.0 as usize])).collect();
            reordered.push(node.task.clone(), &deps, node.label.clone())?;
        }
        Ok(RankSchedule {
            graph: reordered,
            original: order.iter().map(|&t| TaskId(t as u32)).collect(),
            roles: order.iter().map(|&t| roles[t]).collect(),
            local_device: device_rank.iter().map(|&r| r == rank).collect(),
            rank,
            ranks,
        })
    }

    /// This rank's operations of every step, each step's in issue order (an empty list for a
    /// step without this rank, none after its last). An operation's `task` is its position in
    /// [`RankSchedule::graph`].
    pub fn steps(&self) -> Vec<Vec<StepOp>> {
        steps_of(&self.graph, &self.roles)
    }
}

/// The output blocks the Store tasks of `roles`' rank write, as (output, block type): for one
/// process they tile every output.
pub fn stored_blocks(graph: &TaskGraph, roles: &[Role]) -> Vec<(usize, TensorType)> {
    let nodes = graph.nodes().iter().zip(roles);
    nodes
        .filter_map(|(n, r)| match n.task {
            Task::Store { output, src } if *r == Role::Local => Some((output, graph.buffer(src).ty.clone())),
            _ => None,
        })
        .collect()
}

/// One send or receive of a rank, with the buffer of its own it reads or fills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepOp {
    /// The operation (its task a position in the rank's schedule).
    pub op: RankOp,
    /// The local buffer: a send's source, a receive's destination.
    pub buffer: BufferId,
}

/// The operations of every step in `roles` (see [`RankSchedule::steps`]).
pub fn steps_of(graph: &TaskGraph, roles: &[Role]) -> Vec<Vec<StepOp>> {
    let mut steps: Vec<Vec<StepOp>> = Vec::new();
    for (t, role) in roles.iter().enumerate() {
        let Task::Transfer { src, dst } = graph.nodes()[t].task else { continue };
        let (peer, step, direction, buffer) = match *role {
            Role::Send { peer, step } => (peer, step, Direction::Send, src),
            Role::Recv { peer, step } => (peer, step, Direction::Recv, dst),
            Role::Local | Role::Remote => continue,
        };
        if steps.len() <= step {
            steps.resize(step + 1, Vec::new());
        }
        let op = RankOp { task: TaskId(t as u32), peer, direction, bytes: graph.buffer(src).bytes() };
        steps[step].push(StepOp { op, buffer });
    }
    steps
}

/// Every task of `graph` in one order: the tasks in `sequence` (this rank's, in its issue
/// order) in that order, every other task ([`Role::Remote`]) as soon as its dependencies have
/// run (lowest id first). Fails with the first task of `sequence` reached before its
/// dependencies.
fn merge_order(graph: &TaskGraph, roles: &[Role], sequence: &[usize]) -> Result<Vec<usize>, TaskId> {
    let n = graph.nodes().len();
    let mut waiting: Vec<usize> = graph.nodes().iter().map(|node| node.deps.len()).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (t, node) in graph.nodes().iter().enumerate() {
        for d in &node.deps {
            dependents[d.0 as usize].push(t);
        }
    }
    let mut ready: BinaryHeap<Reverse<usize>> =
        (0..n).filter(|&t| roles[t] == Role::Remote && waiting[t] == 0).map(Reverse).collect();
    let mut order = Vec::with_capacity(n);
    let mut next = sequence.iter();
    loop {
        let t = match ready.pop() {
            Some(Reverse(t)) => t,
            None => match next.next() {
                Some(&t) if waiting[t] == 0 => t,
                Some(&t) => return Err(TaskId(t as u32)),
                None => break,
            },
        };
        order.push(t);
        for &u in &dependents[t] {
            waiting[u] -= 1;
            if waiting[u] == 0 && roles[u] == Role::Remote {
                ready.push(Reverse(u));
            }
        }
    }
    debug_assert_eq!(order.len(), n, "every task is this rank's or another's");
    Ok(order)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::exchange_steps::tests::layered;

    /// Checks a rank's schedule of `g`: a permutation of the tasks respecting every
    /// dependency; the same roles as the job's graph says; each step's operations
    /// consecutive among this rank's issued tasks (remote tasks may sit between), the steps
    /// in increasing order.
    fn check(g: &TaskGraph, device_rank: &[usize], rank: usize, ranks: usize) {
        let s = RankSchedule::new(g, device_rank, rank, ranks).expect("a schedule");
        let n = g.nodes().len();
        let mut seen = vec![false; n];
        for (p, &t) in s.original.iter().enumerate() {
            let node = &g.nodes()[t.0 as usize];
            assert!(!seen[t.0 as usize]);
            seen[t.0 as usize] = true;
            assert_eq!(s.graph.nodes()[p].task, node.task);
            let mut deps: Vec<TaskId> = s.graph.nodes()[p].deps.iter().map(|d| s.original[d.0 as usize]).collect();
            let mut expected = node.deps.clone();
            deps.sort_unstable();
            expected.sort_unstable();
            assert_eq!(deps, expected);
        }
        assert!(s.graph.check_complete().is_ok() || g.check_complete().is_err());
        // This rank's issued tasks: a step's operations together, steps ascending.
        let issued: Vec<Role> = s.roles.iter().copied().filter(|r| *r != Role::Remote).collect();
        let mut done: Vec<usize> = Vec::new();
        for w in issued.windows(2) {
            if let (Some(a), b) = (w[0].step(), w[1].step())
                && b != Some(a)
            {
                done.push(a);
                assert!(b.is_none_or(|b| b > a), "step {b:?} after step {a}");
            }
        }
        done.dedup();
        let mut sorted = done.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(done, sorted, "a step split in two: {:?}", s.roles);
        // The job's operations of this rank, step by step, are the schedule's.
        let rank_of = |d: DeviceId| device_rank[d.0 as usize];
        let job = crate::exchange_steps::rank_steps(g, &rank_of, rank);
        let mine: Vec<Vec<(TaskId, usize, Direction)>> = s
            .steps()
            .iter()
            .map(|ops| ops.iter().map(|o| (s.original[o.op.task.0 as usize], o.op.peer, o.op.direction)).collect())
            .collect();
        let expected: Vec<Vec<(TaskId, usize, Direction)>> =
            job.iter().map(|ops| ops.iter().map(|o| (o.task, o.peer, o.direction)).collect()).collect();
        let trimmed = expected.len() - expected.iter().rev().take_while(|v| v.is_empty()).count();
        assert_eq!(mine, expected[..trimmed]);
    }

    #[test]
    fn a_rank_issues_its_steps_together_after_their_producers() {
        // The graph of `exchange_steps`' test: three ranks of one device each.
        let ops = [
            (1, 0, 0, 0),
            (0, 1, 0, 0),
            (2, 2, 0, 0),
            (0, 0, 0, 1),
            (1, 1, 0, 1),
            (0, 1, 2, 0),
            (1, 0, 2, 0),
            (1, 1, 2, 3),
            (0, 1, 4, 0),
        ];
        let g = layered(3, &ops);
        for rank in 0..3 {
            check(&g, &[0, 1, 2], rank, 3);
        }
        let s = RankSchedule::new(&g, &[0, 1, 2], 0, 3).unwrap();
        let roles = &s.roles;
        assert_eq!(roles.iter().filter(|r| matches!(r, Role::Send { .. })).count(), 2);
        assert_eq!(roles.iter().filter(|r| matches!(r, Role::Recv { .. })).count(), 3);
        // Rank 2 computes alone: every transfer is another's.
        let s = RankSchedule::new(&g, &[0, 1, 2], 2, 3).unwrap();
        assert!(s.roles.iter().all(|r| r.step().is_none()));
        assert!(s.steps().is_empty());
    }

    #[test]
    fn one_rank_is_the_graph_as_it_is() {
        let g = layered(2, &[(1, 0, 0, 0), (1, 1, 0, 1)]);
        let s = RankSchedule::new(&g, &[0, 0], 0, 1).unwrap();
        assert_eq!(s.graph, g);
        assert!(s.roles.iter().all(|r| *r == Role::Local));
    }

    #[test]
    fn a_device_list_that_does_not_fit_is_refused() {
        let g = layered(2, &[(1, 0, 0, 0)]);
        assert_eq!(RankSchedule::new(&g, &[0], 0, 1).unwrap_err(), RankError::Devices { given: 1, devices: 2 });
        assert_eq!(RankSchedule::new(&g, &[0, 2], 0, 2).unwrap_err(), RankError::Rank { rank: 2, ranks: 2 });
        assert_eq!(RankSchedule::new(&g, &[0, 1], 3, 2).unwrap_err(), RankError::Rank { rank: 3, ranks: 2 });
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Random layered graphs over four devices, as one, two and four ranks: every rank's
        /// schedule is a valid order with its steps together and ascending.
        #[test]
        fn every_rank_gets_a_valid_schedule(
            ops in prop::collection::vec((0u32..4, 0u32..4, 0usize..6, 0usize..6), 1..40),
            per_rank in prop::sample::select(vec![1usize, 2, 4]),
        ) {
            let g = layered(4, &ops);
            let ranks = 4 / per_rank;
            let device_rank: Vec<usize> = (0..4).map(|d| d / per_rank).collect();
            for rank in 0..ranks {
                check(&g, &device_rank, rank, ranks);
            }
        }
    }
}
