//! A race checker for stream plans, without a GPU: proves that every two tasks touching
//! overlapping device memory, at least one of them writing, are ordered by happens-before
//! (issue order on one stream, plus event waits, transitively).
//!
//! # Design
//! The memory model is the one the executor issues against: every task reads and writes
//! the byte ranges of its buffers (a pool buffer at its plan offset in its GPU's pool, a
//! Load destination in its GPU's resident region) and writes and reads its scratch areas
//! ([`accesses`]). Load tasks issue nothing (their data is resident before the run), nor do
//! aliased transfers ([`StreamPlan::elided`]: their destination is their source's memory), so
//! they are no accesses; a run writing a resident buffer is an error of its own. Host outputs are
//! left out: the Store tasks of one output write the disjoint blocks that tile it and no task
//! reads them during a run. Constant tables are only read.
//!
//! Happens-before is computed independently of how the plan was built ([`HappensBefore`]):
//! every task gets a vector clock, its stream's previous task's joined with the clocks of the
//! tasks it waits for, and `a` happens before `b` (`a` issued first) exactly when `b`'s
//! clock covers `a` on `a`'s stream. Overlapping accesses are found per memory region by a
//! sweep over the ranges sorted by start, so only overlapping pairs are compared.

use einsum_core::taskgraph::{Task, TaskGraph, TaskId};

use crate::rank_schedule::Role;
use crate::stream_plan::StreamPlan;

/// A memory region of one GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Region {
    /// The per-run pool of a GPU.
    Pool(usize),
    /// The resident region of a GPU (the Load destinations).
    Resident(usize),
}

/// One task's access to a byte range of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// The task (its schedule position).
    pub task: usize,
    /// The region.
    pub region: Region,
    /// First byte.
    pub lo: usize,
    /// One past the last byte.
    pub hi: usize,
    /// Whether the task writes the range (else it only reads it).
    pub write: bool,
}

/// Why a plan is not race-free.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RaceError {
    /// Two tasks touch overlapping bytes, at least one writing, with neither ordered before
    /// the other.
    #[error(
        "tasks {first} and {second} both touch bytes {lo}..{hi} of {region:?} ({kind}) and neither happens before the other"
    )]
    Race {
        /// The task issued first.
        first: TaskId,
        /// The task issued second.
        second: TaskId,
        /// Where.
        region: Region,
        /// The overlap's first byte.
        lo: usize,
        /// One past its last byte.
        hi: usize,
        /// `write-write`, `write-read` or `read-write` (first task's access, then second's).
        kind: &'static str,
    },
    /// A wait the executor could not issue: for an event never recorded, or one recorded
    /// after the waiting task is issued.
    #[error("task {task} waits for task {on}, {reason}")]
    BadWait {
        /// The waiting task.
        task: TaskId,
        /// The task whose event it waits for.
        on: TaskId,
        /// What is wrong.
        reason: &'static str,
    },
    /// A task writes a resident buffer, which only loads may fill.
    #[error("task {task} writes buffer {buffer}, which lives in the resident region")]
    ResidentWrite {
        /// The task.
        task: TaskId,
        /// The buffer.
        buffer: usize,
    },
}

/// Every byte range every issued task of `graph` reads or writes under `plan`, with
/// `scratch[t]` the scratch sizes of task `t` (as given to [`StreamPlan::new`]). Fails when a
/// task writes a resident buffer. Empty ranges are left out.
pub fn accesses(graph: &TaskGraph, plan: &StreamPlan, scratch: &[Vec<usize>]) -> Result<Vec<Access>, RaceError> {
    let mut out = Vec::new();
    for (t, n) in graph.nodes().iter().enumerate() {
        if plan.elided[t] || plan.roles[t] == Role::Remote || matches!(n.task, Task::Load { .. }) {
            continue;
        }
        let mut push = |region, lo: usize, bytes: usize, write| {
            if bytes > 0 {
                out.push(Access { task: t, region, lo, hi: lo + bytes, write });
            }
        };
        let touched =
            n.task.reads().into_iter().map(|b| (b, false)).chain(n.task.writes().into_iter().map(|b| (b, true)));
        for (b, write) in touched {
            let (i, buf) = (b.0 as usize, graph.buffer(b));
            if !plan.local_device[buf.device.0 as usize] {
                // The other end of a send or receive: another rank's memory.
                continue;
            }
            match plan.resident.location(i) {
                Some(_) if write => return Err(RaceError::ResidentWrite { task: TaskId(t as u32), buffer: i }),
                Some((gpu, offset)) => push(Region::Resident(gpu), offset, buf.bytes(), false),
                None => {
                    let gpu = plan.gpu_of_device[buf.device.0 as usize];
                    push(Region::Pool(gpu), plan.buffer_offset[i], buf.bytes(), write);
                }
            }
        }
        let gpu = plan.gpu_of_stream(plan.stream[t]);
        for (&offset, &bytes) in plan.scratch_offset[t].iter().zip(scratch.get(t).into_iter().flatten()) {
            push(Region::Pool(gpu), offset, bytes, true);
        }
    }
    Ok(out)
}

/// Happens-before between the tasks of a stream plan, as vector clocks.
pub struct HappensBefore {
    stream: Vec<usize>,
    /// For every issued task, per stream, one past the latest task on that stream that is
    /// complete when the task completes (the task itself on its own stream).
    clock: Vec<Vec<usize>>,
}

impl HappensBefore {
    /// The happens-before relation of `plan`'s issue (`silent` tasks, Loads and aliased
    /// transfers, issue nothing). Fails on a wait for an event that is never recorded,
    /// recorded by a silent task, or recorded after the waiting task is issued.
    pub fn new(plan: &StreamPlan, silent: &[bool]) -> Result<HappensBefore, RaceError> {
        let streams = plan.streams();
        let mut tail: Vec<Vec<usize>> = vec![vec![0; streams]; streams];
        let mut clock: Vec<Vec<usize>> = Vec::with_capacity(plan.stream.len());
        for (t, &s) in plan.stream.iter().enumerate() {
            if silent[t] {
                clock.push(Vec::new());
                continue;
            }
            let mut c = tail[s].clone();
            for &w in &plan.waits[t] {
                let on = w.0 as usize;
                let bad = |reason| Err(RaceError::BadWait { task: TaskId(t as u32), on: w, reason });
                if on >= t {
                    return bad("which is not issued before it");
                }
                if silent[on] {
                    return bad("which issues nothing");
                }
                if !plan.record[on] {
                    return bad("which records no event");
                }
                for (x, &y) in c.iter_mut().zip(&clock[on]) {
                    *x = (*x).max(y);
                }
            }
            c[s] = t + 1;
            tail[s].clone_from(&c);
            clock.push(c);
        }
        Ok(HappensBefore { stream: plan.stream.clone(), clock })
    }

    /// Whether task `a` completes before task `b` starts (both issued tasks).
    pub fn before(&self, a: usize, b: usize) -> bool {
        a < b && self.clock[b][self.stream[a]] > a
    }
}

/// Checks `plan` (for `graph`, with scratch sizes `scratch`): every two tasks touching
/// overlapping bytes of one region, at least one writing, must be ordered by happens-before;
/// every wait must be issuable; no run may write a resident buffer. Returns the first
/// violation found.
pub fn check(graph: &TaskGraph, plan: &StreamPlan, scratch: &[Vec<usize>]) -> Result<(), RaceError> {
    let silent: Vec<bool> = graph
        .nodes()
        .iter()
        .zip(&plan.elided)
        .zip(&plan.roles)
        .map(|((n, &e), r)| e || *r == Role::Remote || matches!(n.task, Task::Load { .. }))
        .collect();
    // The sends and receives of one step run together, as one group.
    let together = |a: usize, b: usize| plan.roles[a].step().is_some() && plan.roles[a].step() == plan.roles[b].step();
    let hb = HappensBefore::new(plan, &silent)?;
    let mut all = accesses(graph, plan, scratch)?;
    all.sort_by_key(|a| (a.region, a.lo, a.task));
    // Sweep every region by start: `active` holds the ranges started so far that still
    // extend past the current start, so each comparison is of an overlapping pair.
    let mut active: Vec<Access> = Vec::new();
    for x in all {
        active.retain(|y| y.region == x.region && y.hi > x.lo);
        for y in &active {
            if y.task == x.task || !(x.write || y.write) {
                continue;
            }
            let (a, b) = if y.task < x.task { (y, &x) } else { (&x, y) };
            if !hb.before(a.task, b.task) || together(a.task, b.task) {
                let kind = match (a.write, b.write) {
                    (true, true) => "write-write",
                    (true, false) => "write-read",
                    _ => "read-write",
                };
                return Err(RaceError::Race {
                    first: TaskId(a.task as u32),
                    second: TaskId(b.task as u32),
                    region: x.region,
                    lo: x.lo.max(y.lo),
                    hi: x.hi.min(y.hi),
                    kind,
                });
            }
        }
        active.push(x);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use einsum_core::taskgraph::examples::{gather_after_a_slice, two_device_gather};
    use einsum_core::taskgraph::{Boundary, DeviceId};
    use einsum_core::{DType, Interval, TensorType};

    use super::*;

    #[test]
    fn planned_streams_are_race_free() {
        for g in [two_device_gather(), gather_after_a_slice()] {
            for (gpus, streams) in [(1, 1), (1, 4), (2, 1), (2, 4)] {
                let plan = StreamPlan::new(&g, gpus, streams, &[]);
                check(&g, &plan, &[]).unwrap_or_else(|e| panic!("{gpus} GPUs, {streams} streams: {e}"));
            }
        }
    }

    /// The plan with transfers copying even within a GPU.
    fn copying(g: &TaskGraph, scratch: &[Vec<usize>]) -> StreamPlan {
        use crate::stream_plan::PlanOptions;
        StreamPlan::with_options(g, 1, &PlanOptions { streams_per_gpu: 1, alias_transfers: false }, scratch)
    }

    #[test]
    fn a_dropped_wait_is_a_race() {
        let g = gather_after_a_slice();
        let mut plan = copying(&g, &[]);
        assert_eq!(plan.waits[3], vec![TaskId(2)]);
        plan.waits[3].clear();
        let err = check(&g, &plan, &[]).unwrap_err();
        // The transfer reads c while the slice may still write it; and nothing else orders
        // the stitch (whose output reuses c's bytes) after the slice either.
        assert!(matches!(err, RaceError::Race { first: TaskId(2), second: TaskId(3) | TaskId(4), .. }), "{err}");
        // With the transfer aliased, the stitch reads c's bytes itself.
        let mut plan = StreamPlan::new(&g, 1, 1, &[]);
        assert_eq!(plan.waits[4], vec![TaskId(2)]);
        plan.waits[4].clear();
        let err = check(&g, &plan, &[]).unwrap_err();
        assert!(matches!(err, RaceError::Race { first: TaskId(2), second: TaskId(4), .. }), "{err}");
    }

    #[test]
    fn waits_for_unrecorded_or_later_events_are_refused() {
        let g = gather_after_a_slice();
        let mut plan = copying(&g, &[]);
        plan.record[2] = false;
        assert!(matches!(check(&g, &plan, &[]), Err(RaceError::BadWait { on: TaskId(2), .. })));
        let mut plan = copying(&g, &[]);
        plan.waits[2].push(TaskId(3));
        plan.record[3] = true;
        assert!(matches!(check(&g, &plan, &[]), Err(RaceError::BadWait { task: TaskId(2), .. })));
    }

    #[test]
    fn overlapping_scratch_of_unordered_tasks_is_a_race() {
        // Two slices on different streams with scratch at the same offset.
        let g = gather_after_a_slice();
        let scratch = vec![vec![], vec![], vec![64], vec![64], vec![], vec![]];
        let mut plan = copying(&g, &scratch);
        check(&g, &plan, &scratch).unwrap();
        plan.scratch_offset[3] = plan.scratch_offset[2].clone();
        plan.waits[3].clear();
        assert!(matches!(check(&g, &plan, &scratch), Err(RaceError::Race { .. })));
    }

    /// A random task graph on 1 to 4 devices: `x` loaded whole on every device, then random
    /// slices, transfers to other devices, aggregations of a block with a copy of itself and
    /// whole blocks split in two and stitched back; outputs `y0` and `y1` store random whole
    /// blocks. About a third of the tasks get a scratch area. Returns the graph and scratch
    /// sizes.
    fn random_graph(seed: u64) -> (TaskGraph, Vec<Vec<usize>>) {
        use einsum_core::{Aggregation, SeededRng};
        let mut rng = SeededRng::new(seed);
        let devices = 1 + rng.below(4);
        let whole = TensorType::zero_bounded(&[64]);
        let x = Boundary { name: "x".into(), ty: whole.clone(), dtype: DType::F32 };
        let y = |i: usize| Boundary { name: format!("y{i}"), ty: whole.clone(), dtype: DType::F32 };
        let mut g = TaskGraph::new(devices, vec![x], vec![y(0), y(1)]);
        let mut bufs = Vec::new();
        for d in 0..devices {
            let b = g.add_buffer(DeviceId(d as u32), whole.clone(), DType::F32);
            g.push(Task::Load { input: 0, dst: b }, &[], "load").unwrap();
            bufs.push(b);
        }
        for _ in 0..10 + rng.below(30) {
            let src = bufs[rng.below(bufs.len())];
            let (device, ty) = (g.buffer(src).device, g.buffer(src).ty.clone());
            let dst = match rng.below(4) {
                0 => {
                    let Interval { lo, hi } = ty.dim(0);
                    let a = lo + rng.below(hi - lo);
                    let b = a + 1 + rng.below(hi - a);
                    let dst =
                        g.add_buffer(device, TensorType::from_intervals(vec![Interval { lo: a, hi: b }]), DType::F32);
                    g.push(Task::Slice { src, dst }, &[], "slice").unwrap();
                    dst
                }
                1 if devices > 1 => {
                    let to = (device.0 as usize + 1 + rng.below(devices - 1)) % devices;
                    let dst = g.add_buffer(DeviceId(to as u32), ty, DType::F32);
                    g.push(Task::Transfer { src, dst }, &[], "transfer").unwrap();
                    dst
                }
                2 if ty == whole => {
                    let m = 1 + rng.below(63);
                    let halves = [Interval { lo: 0, hi: m }, Interval { lo: m, hi: 64 }].map(|i| {
                        let half = g.add_buffer(device, TensorType::from_intervals(vec![i]), DType::F32);
                        g.push(Task::Slice { src, dst: half }, &[], "split").unwrap();
                        half
                    });
                    let dst = g.add_buffer(device, ty, DType::F32);
                    g.push(Task::Stitch { srcs: halves.to_vec(), dst }, &[], "stitch").unwrap();
                    dst
                }
                _ => {
                    let copy = g.add_buffer(device, ty.clone(), DType::F32);
                    g.push(Task::Slice { src, dst: copy }, &[], "copy").unwrap();
                    let dst = g.add_buffer(device, ty, DType::F32);
                    g.push(Task::Aggregate { srcs: vec![src, copy], dst, agg: Aggregation::Sum }, &[], "agg").unwrap();
                    dst
                }
            };
            bufs.push(dst);
        }
        let wholes: Vec<_> = bufs.iter().copied().filter(|&b| g.buffer(b).ty == whole).collect();
        for output in 0..2 {
            let src = wholes[rng.below(wholes.len())];
            g.push(Task::Store { output, src }, &[], "store").unwrap();
        }
        let scratch = (0..g.nodes().len())
            .map(|_| if rng.below(3) == 0 { vec![1 + rng.below(1000)] } else { Vec::new() })
            .collect();
        (g, scratch)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// On random graphs, on 1 GPU (transfers aliased or copied) and 2 GPUs with 1, 2 and 4
        /// streams per GPU, the plan is race-free, and every one of its waits is needed: dropping any single one is flagged
        /// as a race (each wait stands for a read of what its task wrote, or for a reuse of
        /// bytes it touched, and no other wait implies it).
        #[test]
        fn random_plans_are_race_free_and_every_wait_is_needed(seed in 0u64..1_000_000) {
            let (g, scratch) = random_graph(seed);
            for (gpus, alias_transfers) in [(1, true), (1, false), (2, true)] {
                for streams_per_gpu in [1, 2, 4] {
                    let options = crate::stream_plan::PlanOptions { streams_per_gpu, alias_transfers };
                    let plan = StreamPlan::with_options(&g, gpus, &options, &scratch);
                    proptest::prop_assert_eq!(check(&g, &plan, &scratch), Ok(()));
                    for t in 0..plan.waits.len() {
                        for i in 0..plan.waits[t].len() {
                            let mut dropped = plan.clone();
                            dropped.waits[t].remove(i);
                            let flagged = matches!(check(&g, &dropped, &scratch), Err(RaceError::Race { .. }));
                            proptest::prop_assert!(flagged, "{gpus} GPUs, {options:?}: dropping task {t}'s wait {i} went unnoticed");
                        }
                    }
                }
            }
        }
    }

    /// A kernel library with no kernels (the random graphs have no kernel tasks).
    struct NoKernels;

    impl einsum_core::KernelLibrary for NoKernels {
        fn run(
            &self,
            _: usize,
            _: &[einsum_core::HostTensor],
            _: &[(TensorType, DType)],
        ) -> Result<Vec<einsum_core::HostTensor>, String> {
            Err("no kernels".into())
        }

        fn name(&self, kernel: usize) -> String {
            format!("kernel {kernel}")
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(16))]
        /// On random graphs lowered and emulated on 1 and 2 GPUs with 1 and 4 streams per GPU
        /// (on one GPU the transfers alias), runs in schedule order and with the streams
        /// interleaved at random give the task-graph interpreter's outputs exactly.
        #[test]
        fn random_plans_run_interleaved_match_the_interpreter(seed in 0u64..1_000_000) {
            let (g, _) = random_graph(seed);
            let x = einsum_core::HostTensor::random(TensorType::zero_bounded(&[64]), DType::F32, seed);
            let inputs = [x];
            let expected = einsum_core::taskgraph::interpret(&g, &NoKernels, &inputs).unwrap();
            let lowered = crate::lower::lower(&g, &NoKernels, &crate::KernelRegistry::default()).unwrap();
            for gpus in [1, 2] {
                for streams in [1, 4] {
                    let mut e = crate::emulate::Emulator::with_streams(&g, &lowered, gpus, streams);
                    e.load_all(&inputs).unwrap();
                    proptest::prop_assert_eq!(&e.run().unwrap(), &expected, "{} GPUs, {} streams", gpus, streams);
                    for k in 0..3 {
                        let out = e.run_interleaved(seed + k).unwrap();
                        proptest::prop_assert_eq!(&out, &expected, "{} GPUs, {} streams, interleaving {}", gpus, streams, k);
                    }
                }
            }
        }
    }
}
