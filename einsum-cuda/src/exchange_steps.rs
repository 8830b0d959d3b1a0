//! The transfers between ranks of a multi-process job, grouped into the steps NCCL issues
//! them in (pure planning: no library, no GPU).
//!
//! NCCL's point-to-point calls pair a rank's `ncclSend` with the peer's `ncclRecv` in the
//! order both post them, and the calls of one `ncclGroupStart`/`ncclGroupEnd` group are issued
//! together, so two transfers where one waits (through the graph) for the other cannot share
//! a group without a deadlock. A crossing transfer's *step* is the number of crossing
//! transfers on the longest dependency chain before it: transfers of one step never depend on
//! each other, so each step is one group, and the steps run in order. Within a step every
//! rank lists its operations in task order, so the sends from `a` to `b` and the receives of
//! `b` from `a` come in the same order on both sides ([`check_pairing`]). [`issue_order`]
//! places each step among a rank's own tasks: after the local work it waits for, before the
//! local work that reads what it receives.

use einsum_core::taskgraph::{DeviceId, Task, TaskGraph, TaskId};

/// Which side of a transfer a rank is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The source device is this rank's.
    Send,
    /// The destination device is this rank's.
    Recv,
}

/// One rank's part of one crossing transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankOp {
    /// The transfer task.
    pub task: TaskId,
    /// The rank on the other side.
    pub peer: usize,
    /// This rank's side.
    pub direction: Direction,
    /// The bytes moved.
    pub bytes: usize,
}

/// How a job's steps break NCCL's rules ([`check_pairing`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PairingError {
    /// Rank `from`'s sends to `to` in `step` are not `to`'s receives from `from` there, in
    /// the same order and sizes: NCCL would pair the wrong buffers or wait forever.
    #[error("step {step}: rank {from} sends {sent:?} to rank {to}, which receives {received:?}")]
    Unpaired {
        /// The step.
        step: usize,
        /// The sending rank.
        from: usize,
        /// The receiving rank.
        to: usize,
        /// The sends (transfer, bytes), in the sender's order.
        sent: Vec<(TaskId, usize)>,
        /// The receives (transfer, bytes), in the receiver's order.
        received: Vec<(TaskId, usize)>,
    },
    /// Transfer `later` depends, through the graph, on transfer `earlier` of the same step:
    /// one group would wait for itself.
    #[error("step {step}: {later} depends on {earlier}, a transfer of the same step")]
    SameStep {
        /// The step.
        step: usize,
        /// The transfer waited for.
        earlier: TaskId,
        /// The transfer that waits.
        later: TaskId,
    },
}

/// Per task, its step when it is a transfer between devices of two ranks (`rank_of` gives a
/// device's rank); `None` for every other task. One pass in task order (dependencies point
/// backwards): a task's level is the most crossing transfers on a chain of dependencies
/// before it, and a crossing transfer's step is its level.
pub fn crossing_steps(graph: &TaskGraph, rank_of: &dyn Fn(DeviceId) -> usize) -> Vec<Option<usize>> {
    let crossing = |task: &Task| match *task {
        Task::Transfer { src, dst } => rank_of(graph.buffer(src).device) != rank_of(graph.buffer(dst).device),
        _ => false,
    };
    let mut level = vec![0usize; graph.nodes().len()];
    let mut steps = vec![None; graph.nodes().len()];
    for (t, node) in graph.nodes().iter().enumerate() {
        level[t] = node
            .deps
            .iter()
            .map(|d| level[d.0 as usize] + usize::from(steps[d.0 as usize].is_some()))
            .max()
            .unwrap_or(0);
        if crossing(&node.task) {
            steps[t] = Some(level[t]);
        }
    }
    steps
}

/// Rank `rank`'s operations, step by step (empty steps included, so that every rank has as
/// many steps as the job), each step in task order.
pub fn rank_steps(graph: &TaskGraph, rank_of: &dyn Fn(DeviceId) -> usize, rank: usize) -> Vec<Vec<RankOp>> {
    let steps = crossing_steps(graph, rank_of);
    let mut out: Vec<Vec<RankOp>> = vec![Vec::new(); steps.iter().flatten().max().map_or(0, |s| s + 1)];
    for (t, step) in steps.iter().enumerate() {
        let (Some(step), Task::Transfer { src, dst }) = (step, &graph.nodes()[t].task) else { continue };
        let (from, to) = (rank_of(graph.buffer(*src).device), rank_of(graph.buffer(*dst).device));
        let bytes = graph.buffer(*src).bytes();
        let task = TaskId(t as u32);
        if from == rank {
            out[*step].push(RankOp { task, peer: to, direction: Direction::Send, bytes });
        } else if to == rank {
            out[*step].push(RankOp { task, peer: from, direction: Direction::Recv, bytes });
        }
    }
    out
}

/// Checks the plan of every rank of a job of `ranks` ranks: in every step, the sends of rank
/// `a` to rank `b` are the receives of `b` from `a`, in the same order and sizes; and no
/// transfer depends, through the graph, on another of its own step. The error says where.
/// Meant for tests and debugging: it is quadratic in the ranks and, for the second check, in
/// the tasks.
pub fn check_pairing(graph: &TaskGraph, rank_of: &dyn Fn(DeviceId) -> usize, ranks: usize) -> Result<(), PairingError> {
    let plans: Vec<Vec<Vec<RankOp>>> = (0..ranks).map(|r| rank_steps(graph, rank_of, r)).collect();
    for (a, plan) in plans.iter().enumerate() {
        for (step, ops) in plan.iter().enumerate() {
            for (b, theirs) in plans.iter().enumerate() {
                let sent: Vec<(TaskId, usize)> = ops
                    .iter()
                    .filter(|o| o.peer == b && o.direction == Direction::Send)
                    .map(|o| (o.task, o.bytes))
                    .collect();
                let received: Vec<(TaskId, usize)> = theirs
                    .get(step)
                    .into_iter()
                    .flatten()
                    .filter(|o| o.peer == a && o.direction == Direction::Recv)
                    .map(|o| (o.task, o.bytes))
                    .collect();
                if sent != received {
                    return Err(PairingError::Unpaired { step, from: a, to: b, sent, received });
                }
            }
        }
    }
    check_steps(graph, &crossing_steps(graph, rank_of))
}

/// Checks that no transfer depends, through the graph, on another of its own step.
fn check_steps(graph: &TaskGraph, steps: &[Option<usize>]) -> Result<(), PairingError> {
    let n = graph.nodes().len();
    for (t, step) in steps.iter().enumerate() {
        let Some(step) = step else { continue };
        // The tasks `t` reaches: its dependents, transitively (dependents come later).
        let mut reached = vec![false; n];
        reached[t] = true;
        for u in t + 1..n {
            if graph.nodes()[u].deps.iter().any(|d| reached[d.0 as usize]) {
                reached[u] = true;
                if steps[u] == Some(*step) {
                    return Err(PairingError::SameStep {
                        step: *step,
                        earlier: TaskId(t as u32),
                        later: TaskId(u as u32),
                    });
                }
            }
        }
    }
    Ok(())
}

/// One entry of a rank's issue order ([`issue_order`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Issue {
    /// A task of this rank's devices (not a crossing transfer).
    Task(TaskId),
    /// Step `.0`'s group of sends and receives ([`rank_steps`]).
    Step(usize),
}

/// The order rank `rank` issues its work in: its own devices' tasks (but the crossing
/// transfers) and its steps, each step after every local task its sends read from or its
/// transfers otherwise wait for, and before every local task that reads what it receives;
/// steps in increasing order, and otherwise as close to the graph's schedule order as those
/// constraints allow (a step takes the place of its first transfer). Every rank issuing its
/// steps in this order cannot deadlock: a step's sends wait only for local work, which waits
/// only for earlier steps.
pub fn issue_order(graph: &TaskGraph, rank_of: &dyn Fn(DeviceId) -> usize, rank: usize) -> Vec<Issue> {
    let steps = crossing_steps(graph, rank_of);
    let n = graph.nodes().len();
    let step_count = steps.iter().flatten().max().map_or(0, |s| s + 1);
    // Nodes: the local tasks that are not crossing transfers (0..n, by task), then the steps
    // (n + k); `None` for a task of another rank.
    let device_of = |t: usize| {
        let task = &graph.nodes()[t].task;
        let b = task.written_buffers().first().or(task.read_buffers().first()).copied();
        b.map(|b| graph.buffer(b).device)
    };
    let node_of = |t: usize| -> Option<usize> {
        match steps[t] {
            Some(k) => {
                let Task::Transfer { src, dst } = graph.nodes()[t].task else { unreachable!("steps are transfers") };
                let ours = rank_of(graph.buffer(src).device) == rank || rank_of(graph.buffer(dst).device) == rank;
                ours.then_some(n + k)
            }
            None => device_of(t).filter(|&d| rank_of(d) == rank).map(|_| t),
        }
    };
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n + step_count];
    let mut present = vec![false; n + step_count];
    // A step's key: its first transfer (this rank's) in schedule order.
    let mut key: Vec<usize> = (0..n + step_count).collect();
    for k in 0..step_count {
        key[n + k] = usize::MAX;
    }
    for t in 0..n {
        let Some(me) = node_of(t) else { continue };
        present[me] = true;
        if me >= n {
            key[me] = key[me].min(t);
        }
        for d in &graph.nodes()[t].deps {
            if let Some(p) = node_of(d.0 as usize)
                && p != me
            {
                preds[me].push(p);
            }
        }
    }
    // Steps in increasing order: every rank posts its groups in the same order.
    let present_steps: Vec<usize> = (n..n + step_count).filter(|&s| present[s]).collect();
    for w in present_steps.windows(2) {
        preds[w[1]].push(w[0]);
    }
    // Kahn's algorithm, smallest key first.
    let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n + step_count];
    let mut waiting = vec![0usize; n + step_count];
    for (v, ps) in preds.iter_mut().enumerate() {
        ps.sort_unstable();
        ps.dedup();
        waiting[v] = ps.len();
        for &p in ps.iter() {
            succs[p].push(v);
        }
    }
    let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<(usize, usize)>> = (0..n + step_count)
        .filter(|&v| present[v] && waiting[v] == 0)
        .map(|v| std::cmp::Reverse((key[v], v)))
        .collect();
    let mut order = Vec::new();
    while let Some(std::cmp::Reverse((_, v))) = ready.pop() {
        order.push(if v >= n { Issue::Step(v - n) } else { Issue::Task(TaskId(v as u32)) });
        for &s in &succs[v] {
            waiting[s] -= 1;
            if waiting[s] == 0 {
                ready.push(std::cmp::Reverse((key[s], s)));
            }
        }
    }
    debug_assert_eq!(order.len(), present.iter().filter(|&&p| p).count(), "the contracted graph is acyclic");
    order
}

#[cfg(test)]
pub(crate) mod tests {
    use einsum_core::taskgraph::{Boundary, BufferId};
    use einsum_core::{DType, TensorType};
    use proptest::prelude::*;

    use super::*;

    /// A graph of `devices` devices that loads one block on each and then runs `moves`: a
    /// transfer `(from, to)` of the latest block on `from`, or (`from == to`) a slice on that
    /// device of its latest block (local work that the next transfer waits for).
    fn graph(devices: u32, moves: &[(u32, u32)]) -> TaskGraph {
        let ty = TensorType::zero_bounded(&[4]);
        let io = Boundary { name: "x".into(), ty: ty.clone(), dtype: DType::F32 };
        let mut g = TaskGraph::new(devices as usize, vec![io], vec![]);
        let mut latest: Vec<BufferId> = Vec::new();
        for d in 0..devices {
            let b = g.add_buffer(DeviceId(d), ty.clone(), DType::F32);
            g.push(Task::Load { input: 0, dst: b }, &[], "load").expect("well-formed");
            latest.push(b);
        }
        for &(from, to) in moves {
            let src = latest[from as usize];
            let dst = g.add_buffer(DeviceId(to), ty.clone(), DType::F32);
            let task = if from == to { Task::Slice { src, dst } } else { Task::Transfer { src, dst } };
            g.push(task, &[], "move").expect("well-formed");
            latest[to as usize] = dst;
        }
        g
    }

    fn per_device(d: DeviceId) -> usize {
        d.0 as usize
    }

    /// Two independent transfers share step 0; a transfer of a block that arrived by another
    /// (through a slice) is a step later; a transfer within one rank is no step at all.
    #[test]
    fn dependent_transfers_are_later_steps() {
        // Tasks 0..4 load; 4: 0->1, 5: 2->3 (independent), 6: slice on 1, 7: 1->2 (after 4),
        // 8: 3->0 (after 5), 9: 2->2 slice, 10: 2->0 (after 7).
        let g = graph(4, &[(0, 1), (2, 3), (1, 1), (1, 2), (3, 0), (2, 2), (2, 0)]);
        let steps = crossing_steps(&g, &per_device);
        assert_eq!(steps[4..], [Some(0), Some(0), None, Some(1), Some(1), None, Some(2)]);
        let pairs = |r: usize| -> Vec<Vec<(u32, usize, Direction)>> {
            rank_steps(&g, &per_device, r)
                .into_iter()
                .map(|s| s.into_iter().map(|o| (o.task.0, o.peer, o.direction)).collect())
                .collect()
        };
        assert_eq!(
            pairs(0),
            [vec![(4, 1, Direction::Send)], vec![(8, 3, Direction::Recv)], vec![(10, 2, Direction::Recv)]]
        );
        assert_eq!(
            pairs(2),
            [vec![(5, 3, Direction::Send)], vec![(7, 1, Direction::Recv)], vec![(10, 0, Direction::Send)]]
        );
        check_pairing(&g, &per_device, 4).expect("paired");
        // Devices {0, 1} and {2, 3} as two ranks: 4 and 5 stay inside a rank.
        let halves = |d: DeviceId| d.0 as usize / 2;
        let steps = crossing_steps(&g, &halves);
        assert_eq!(steps[4..], [None, None, None, Some(0), Some(0), None, Some(1)]);
        assert_eq!(rank_steps(&g, &halves, 1).iter().map(Vec::len).collect::<Vec<_>>(), [2, 1]);
        check_pairing(&g, &halves, 2).expect("paired");
    }

    /// Tasks of `devices` devices, each loading one block, then `ops`: a kernel `(d, d, i, j)`
    /// on device `d` reading its `i`th and `j`th blocks (modulo how many it has) into a new
    /// one, or a transfer `(to, from, i, _)` of `from`'s `i`th block to `to`. Kernels that join
    /// two blocks make diamonds, so a transfer can wait for several others by several paths.
    pub(crate) fn layered(devices: u32, ops: &[(u32, u32, usize, usize)]) -> TaskGraph {
        let ty = TensorType::zero_bounded(&[4]);
        let io = Boundary { name: "x".into(), ty: ty.clone(), dtype: DType::F32 };
        let mut g = TaskGraph::new(devices as usize, vec![io], vec![]);
        let mut blocks: Vec<Vec<BufferId>> = Vec::new();
        for d in 0..devices {
            let b = g.add_buffer(DeviceId(d), ty.clone(), DType::F32);
            g.push(Task::Load { input: 0, dst: b }, &[], "load").expect("well-formed");
            blocks.push(vec![b]);
        }
        for &(to, from, i, j) in ops {
            let dst = g.add_buffer(DeviceId(to), ty.clone(), DType::F32);
            let task = if from == to {
                let mine = &blocks[to as usize];
                let mut inputs = vec![mine[i % mine.len()], mine[j % mine.len()]];
                inputs.dedup();
                Task::Kernel { kernel: 0, inputs, outputs: vec![dst] }
            } else {
                let theirs = &blocks[from as usize];
                Task::Transfer { src: theirs[i % theirs.len()], dst }
            };
            g.push(task, &[], "op").expect("well-formed");
            blocks[to as usize].push(dst);
        }
        g
    }

    /// The definition, computed slowly: a crossing transfer's step is 0 without a crossing
    /// transfer among its ancestors, else one more than theirs at most.
    fn steps_by_definition(g: &TaskGraph, rank_of: &dyn Fn(DeviceId) -> usize) -> Vec<Option<usize>> {
        let n = g.nodes().len();
        let mut ancestors: Vec<Vec<bool>> = Vec::with_capacity(n);
        let mut steps: Vec<Option<usize>> = vec![None; n];
        for t in 0..n {
            let mut mine = vec![false; n];
            for d in &g.nodes()[t].deps {
                let d = d.0 as usize;
                mine[d] = true;
                for (a, &is) in ancestors[d].iter().enumerate() {
                    mine[a] |= is;
                }
            }
            if let Task::Transfer { src, dst } = g.nodes()[t].task
                && rank_of(g.buffer(src).device) != rank_of(g.buffer(dst).device)
            {
                steps[t] = Some((0..n).filter(|&a| mine[a]).filter_map(|a| steps[a]).max().map_or(0, |s| s + 1));
            }
            ancestors.push(mine);
        }
        steps
    }

    /// Ranks 0 and 1 (one device each) swap their loaded blocks (step 0), each runs a kernel
    /// on what it received and its own block, and they swap the results (step 1, waiting for
    /// step 0 through the kernels); rank 1 then sends a kernel of both rounds back (step 2).
    /// Rank 2 (device 2) only computes locally: it has the job's three steps, all empty.
    #[test]
    fn transfers_after_kernels_on_received_blocks_are_later_steps() {
        // Blocks: device 0 [load, recv, k, recv], device 1 [load, recv, k, recv, k].
        let ops = [
            (1, 0, 0, 0), // 3: 0 -> 1
            (0, 1, 0, 0), // 4: 1 -> 0
            (2, 2, 0, 0), // 5: kernel on 2
            (0, 0, 0, 1), // 6: kernel on 0 (load, received)
            (1, 1, 0, 1), // 7: kernel on 1
            (0, 1, 2, 0), // 8: 1 -> 0 of 7's block
            (1, 0, 2, 0), // 9: 0 -> 1 of 6's block
            (1, 1, 2, 3), // 10: kernel on 1 of 7's and 9's blocks
            (0, 1, 4, 0), // 11: 1 -> 0 of 10's block
        ];
        let g = layered(3, &ops);
        assert!(matches!(g.nodes()[7].task, Task::Kernel { .. }));
        let steps = crossing_steps(&g, &per_device);
        assert_eq!(steps[3..], [Some(0), Some(0), None, None, None, Some(1), Some(1), None, Some(2)]);
        assert_eq!(steps, steps_by_definition(&g, &per_device));
        let op = |t: u32, peer: usize, direction: Direction| RankOp { task: TaskId(t), peer, direction, bytes: 16 };
        assert_eq!(
            rank_steps(&g, &per_device, 0),
            [
                vec![op(3, 1, Direction::Send), op(4, 1, Direction::Recv)],
                vec![op(8, 1, Direction::Recv), op(9, 1, Direction::Send)],
                vec![op(11, 1, Direction::Recv)],
            ]
        );
        assert_eq!(
            rank_steps(&g, &per_device, 1),
            [
                vec![op(3, 0, Direction::Recv), op(4, 0, Direction::Send)],
                vec![op(8, 0, Direction::Send), op(9, 0, Direction::Recv)],
                vec![op(11, 0, Direction::Send)],
            ]
        );
        assert_eq!(rank_steps(&g, &per_device, 2), [vec![], vec![], vec![]]);
        assert_eq!(issue_order(&g, &per_device, 2), [Issue::Task(TaskId(2)), Issue::Task(TaskId(5))]);
        check_pairing(&g, &per_device, 3).expect("paired");
        // Rank 1 computes kernel 10 after step 1 brings 9's block, and sends it in step 2.
        let order = issue_order(&g, &per_device, 1);
        assert_eq!(
            order,
            [
                Issue::Task(TaskId(1)),
                Issue::Step(0),
                Issue::Task(TaskId(7)),
                Issue::Step(1),
                Issue::Task(TaskId(10)),
                Issue::Step(2)
            ]
        );
        check_order(&g, &per_device, 1, &order).expect("valid");
    }

    #[test]
    fn one_rank_has_no_step() {
        let g = graph(2, &[(0, 1), (1, 0)]);
        assert!(rank_steps(&g, &|_| 0, 0).is_empty());
        check_pairing(&g, &|_| 0, 1).expect("nothing to pair");
    }

    /// A step holding a transfer that depends on another of the same step is caught.
    #[test]
    fn the_check_catches_a_step_that_waits_for_itself() {
        let g = graph(2, &[(0, 1), (1, 0)]);
        // Mislabelled steps: both transfers in step 0 (the second reads the first's block).
        let steps = crossing_steps(&g, &per_device);
        assert_eq!(steps[2..], [Some(0), Some(1)]);
        let e = check_steps(&g, &[None, None, Some(0), Some(0)]).unwrap_err();
        assert_eq!(e, PairingError::SameStep { step: 0, earlier: TaskId(2), later: TaskId(3) });
    }

    /// Rank 2 of 4 in the documented graph: its tasks in schedule order, each step at its
    /// first transfer; the slice on device 2 before step 2, which sends its block.
    #[test]
    fn a_rank_issues_its_steps_between_its_producers_and_consumers() {
        let g = graph(4, &[(0, 1), (2, 3), (1, 1), (1, 2), (3, 0), (2, 2), (2, 0)]);
        let order = issue_order(&g, &per_device, 2);
        assert_eq!(
            order,
            [Issue::Task(TaskId(2)), Issue::Step(0), Issue::Step(1), Issue::Task(TaskId(9)), Issue::Step(2)]
        );
        assert_eq!(issue_order(&g, &per_device, 3), [Issue::Task(TaskId(3)), Issue::Step(0), Issue::Step(1)]);
        check_order(&g, &per_device, 2, &order).expect("valid");
        // The slice before the step that brings its block, or a step left out: caught.
        let early = [Issue::Task(TaskId(2)), Issue::Step(0), Issue::Task(TaskId(9)), Issue::Step(1), Issue::Step(2)];
        assert!(check_order(&g, &per_device, 2, &early).unwrap_err().contains("waits for"));
        assert!(check_order(&g, &per_device, 2, &order[..4]).unwrap_err().contains("not issued"));
    }

    /// `order` issues every local task and step once, each after what it waits for.
    fn check_order(
        g: &TaskGraph,
        rank_of: &dyn Fn(DeviceId) -> usize,
        rank: usize,
        order: &[Issue],
    ) -> Result<(), String> {
        let steps = crossing_steps(g, rank_of);
        let position = |i: Issue| order.iter().position(|&o| o == i);
        let node = |t: usize| -> Option<Issue> {
            match steps[t] {
                Some(k) => {
                    let Task::Transfer { src, dst } = g.nodes()[t].task else { return None };
                    (rank_of(g.buffer(src).device) == rank || rank_of(g.buffer(dst).device) == rank)
                        .then_some(Issue::Step(k))
                }
                None => {
                    let task = &g.nodes()[t].task;
                    let b = *task.written_buffers().first().or(task.read_buffers().first())?;
                    (rank_of(g.buffer(b).device) == rank).then_some(Issue::Task(TaskId(t as u32)))
                }
            }
        };
        for t in 0..g.nodes().len() {
            let Some(me) = node(t) else { continue };
            let at = position(me).ok_or_else(|| format!("{me:?} is not issued"))?;
            for d in &g.nodes()[t].deps {
                if let Some(p) = node(d.0 as usize).filter(|&p| p != me) {
                    let before = position(p).ok_or_else(|| format!("{p:?} is not issued"))?;
                    if before > at {
                        return Err(format!("{me:?} is issued before {p:?}, which it waits for"));
                    }
                }
            }
        }
        let issued_steps: Vec<usize> =
            order.iter().filter_map(|o| if let Issue::Step(k) = o { Some(*k) } else { None }).collect();
        if issued_steps.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!("steps out of order: {issued_steps:?}"));
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Random layered graphs (kernels joining two blocks, transfers of any earlier block)
        /// over 4 devices as 2 and 4 ranks: the one-pass steps are the definition's, the
        /// ranks pair up step by step, no step waits for itself, and every rank's issue order
        /// is valid.
        #[test]
        fn random_layered_graphs_pair_up(
            ops in proptest::collection::vec((0u32..4, 0u32..4, 0usize..8, 0usize..8), 0..48)
        ) {
            let g = layered(4, &ops);
            for per_rank in [1, 2] {
                let rank_of = move |d: DeviceId| d.0 as usize / per_rank;
                prop_assert_eq!(crossing_steps(&g, &rank_of), steps_by_definition(&g, &rank_of));
                prop_assert_eq!(check_pairing(&g, &rank_of, 4 / per_rank), Ok(()));
                for rank in 0..4 / per_rank {
                    let order = issue_order(&g, &rank_of, rank);
                    prop_assert_eq!(check_order(&g, &rank_of, rank, &order), Ok(()));
                }
            }
        }

        /// Random moves over 4 devices, as 1, 2 and 4 ranks: every rank's sends are its peer's
        /// receives, step by step, no step waits for itself, and every rank's issue order
        /// issues everything once, after what it waits for, steps in order.
        #[test]
        fn random_graphs_pair_up(moves in proptest::collection::vec((0u32..4, 0u32..4), 0..40)) {
            let g = graph(4, &moves);
            for per_rank in [1, 2, 4] {
                let rank_of = move |d: DeviceId| d.0 as usize / per_rank;
                prop_assert_eq!(check_pairing(&g, &rank_of, 4 / per_rank), Ok(()));
                for rank in 0..4 / per_rank {
                    let order = issue_order(&g, &rank_of, rank);
                    prop_assert_eq!(check_order(&g, &rank_of, rank, &order), Ok(()));
                }
            }
        }
    }
}
