//! The scheduler: a pool of worker threads that pull ready tasks, lowest id first, until
//! every task has run or one has failed. A task started while workers would otherwise sit
//! idle (fewer tasks ready than workers) is lent their cores for its kernel
//! ([`einsum_core::intra_op`]).
//!
//! A process running part of a graph ([`crate::Peers`]) gives every task a [`Role`]: the
//! workers run its own tasks, another process runs the rest, and the transfers that bring
//! blocks from another process finish when the block arrives, which one more thread waits
//! for, so that no worker ever blocks on a message.

use std::{
    any::Any,
    cmp::Reverse,
    collections::BinaryHeap,
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{Condvar, Mutex, MutexGuard},
    thread,
    time::Duration,
};

use einsum_core::{
    BackendError, intra_op,
    taskgraph::{TaskGraph, TaskId},
};

/// What the workers share, behind one lock.
struct State {
    /// Tasks whose dependencies have all finished, lowest id on top.
    ready: BinaryHeap<Reverse<u32>>,
    /// Per task, the number of its dependencies not finished yet.
    waiting: Vec<usize>,
    /// Tasks taken by a worker and not finished yet.
    running: usize,
    /// Tasks finished successfully.
    finished: usize,
    /// The first failure; once set, workers take no more tasks.
    failure: Option<BackendError>,
    /// Tasks to finish by an arrival that have not arrived yet.
    arrivals_left: usize,
}

/// Who finishes a task, in a process that runs part of a graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// A worker of this process runs it.
    Run,
    /// Another process runs it: it counts as finished from the start.
    Elsewhere,
    /// It finishes when its block arrives from another process ([`Arrivals`]).
    Arrives,
}

/// What one thread waits on for the tasks of [`Role::Arrives`]: called again and again until
/// every such task has arrived or the run has failed, each call returns the task whose block
/// arrived (and is in memory), `None` when nothing arrived within about [`POLL`], or
/// the failure that ends the run.
pub(crate) trait Arrivals: Send {
    fn next(&mut self) -> Result<Option<TaskId>, BackendError>;
}

/// How long one wait for an arrival may take before the waiting thread looks whether the run
/// has failed meanwhile.
pub(crate) const POLL: Duration = Duration::from_millis(20);

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Tasks run outside the lock, so a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fail(&self, error: BackendError) {
        let mut s = self.lock();
        s.failure.get_or_insert(error);
        self.wake.notify_all();
    }

    /// Records that `id` finished: its dependents whose dependencies are all finished become
    /// ready (but those that finish by arriving, which never enter the queue).
    fn finish(&self, s: &mut State, id: usize, dependents: &[Vec<u32>], roles: &[Role]) {
        s.finished += 1;
        for &d in &dependents[id] {
            s.waiting[d as usize] -= 1;
            if s.waiting[d as usize] == 0 && roles[d as usize] == Role::Run {
                s.ready.push(Reverse(d));
            }
        }
    }
}

/// Stops the whole run if a worker unwinds outside a task (a bug in the scheduler itself),
/// so the other workers never wait for it.
struct StopOnUnwind<'a>(&'a Shared, usize);

impl Drop for StopOnUnwind<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.fail(BackendError::Panic {
                task: TaskId(self.1 as u32),
                label: "cpu scheduler".into(),
                message: "a worker thread panicked outside a task".into(),
            });
        }
    }
}

/// Runs every task of `graph` through `run` on up to `threads` worker threads, each task
/// once all its dependencies have finished; `run` gets the task and the index of the worker
/// running it (`0..threads`). Returns the first failure: an error `run`
/// returned, or a panic inside `run` (caught, and reported as [`BackendError::Panic`]
/// naming the task). After a failure no task starts; running ones finish and every worker
/// is joined before this returns.
#[cfg(test)]
pub(crate) fn run_all<F>(graph: &TaskGraph, threads: usize, run: F) -> Result<(), BackendError>
where
    F: Fn(TaskId, usize) -> Result<(), BackendError> + Sync,
{
    let roles = vec![Role::Run; graph.nodes().len()];
    run_part(graph, threads, &roles, run, None)
}

/// [`run_all`] for a process that runs part of `graph`: the workers run the tasks whose
/// role is [`Role::Run`]; those of [`Role::Elsewhere`] count as finished from the start; one
/// more thread calls `arrivals` until every task of [`Role::Arrives`] has arrived (`None`
/// only when there is none), each arrival finishing its task. A failure of `arrivals` ends
/// the run like a task's; a failed run stops waiting for arrivals.
pub(crate) fn run_part<F>(
    graph: &TaskGraph,
    threads: usize,
    roles: &[Role],
    run: F,
    arrivals: Option<&mut dyn Arrivals>,
) -> Result<(), BackendError>
where
    F: Fn(TaskId, usize) -> Result<(), BackendError> + Sync,
{
    let n = graph.nodes().len();
    assert_eq!(roles.len(), n, "one role per task");
    let mut dependents: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut waiting = vec![0usize; n];
    for (i, node) in graph.nodes().iter().enumerate() {
        let mut deps = node.deps.clone();
        deps.sort();
        deps.dedup();
        waiting[i] = deps.len();
        for d in deps {
            dependents[d.0 as usize].push(i as u32);
        }
    }
    let mut state = State {
        ready: BinaryHeap::new(),
        waiting,
        running: 0,
        finished: 0,
        failure: None,
        arrivals_left: roles.iter().filter(|&&r| r == Role::Arrives).count(),
    };
    // Another process's tasks are done as far as this one is concerned.
    for (i, deps) in dependents.iter().enumerate() {
        if roles[i] == Role::Elsewhere {
            for &d in deps {
                state.waiting[d as usize] -= 1;
            }
        }
    }
    state.ready = (0..n as u32)
        .filter(|&i| state.waiting[i as usize] == 0 && roles[i as usize] == Role::Run)
        .map(Reverse)
        .collect();
    let own = roles.iter().filter(|&&r| r != Role::Elsewhere).count();
    assert!(state.arrivals_left == 0 || arrivals.is_some(), "tasks arrive, but nothing waits for them");
    let shared = Shared { state: Mutex::new(state), wake: Condvar::new() };
    let workers = threads.clamp(1, own.max(1));
    let job = Job { graph, shared: &shared, dependents: &dependents, roles, own };
    thread::scope(|scope| {
        let (job, run) = (&job, &run);
        let handles: Vec<_> = (0..workers).map(|w| scope.spawn(move || worker(job, (w, workers), run))).collect();
        if let Some(arrivals) = arrivals {
            await_arrivals(job, arrivals);
        }
        for h in handles {
            // A worker that unwound has already stopped the run (StopOnUnwind).
            let _ = h.join();
        }
    });
    let state = shared.state.into_inner().unwrap_or_else(|e| e.into_inner());
    match state.failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// What every thread of one run reads.
struct Job<'a> {
    graph: &'a TaskGraph,
    shared: &'a Shared,
    dependents: &'a [Vec<u32>],
    roles: &'a [Role],
    /// The tasks this process finishes (runs, or sees arrive).
    own: usize,
}

/// Takes arrivals until every awaited task has arrived or the run has failed.
fn await_arrivals(job: &Job<'_>, arrivals: &mut dyn Arrivals) {
    loop {
        {
            let s = job.shared.lock();
            if s.failure.is_some() || s.arrivals_left == 0 {
                return;
            }
        }
        match catch_unwind(AssertUnwindSafe(|| arrivals.next())) {
            Ok(Ok(None)) => {}
            Ok(Ok(Some(id))) => {
                let mut s = job.shared.lock();
                s.arrivals_left -= 1;
                job.shared.finish(&mut s, id.0 as usize, job.dependents, job.roles);
                job.shared.wake.notify_all();
            }
            Ok(Err(e)) => return job.shared.fail(e),
            Err(payload) => {
                return job.shared.fail(BackendError::Panic {
                    task: TaskId(job.graph.nodes().len() as u32),
                    label: "cpu scheduler: arrivals".into(),
                    message: message(&*payload),
                });
            }
        }
    }
}

/// Worker `me` of `workers`: takes ready tasks until the run is over. A task it takes while
/// other workers are idle gets their number as [`intra_op::helpers`]: its kernel may spread
/// over their cores (if a task becomes ready meanwhile, an idle worker takes it and the
/// machine is briefly oversubscribed, never idle).
fn worker<F>(job: &Job<'_>, (me, workers): (usize, usize), run: &F)
where
    F: Fn(TaskId, usize) -> Result<(), BackendError> + Sync,
{
    let (graph, shared) = (job.graph, job.shared);
    let _guard = StopOnUnwind(shared, graph.nodes().len());
    loop {
        let (id, helpers) = {
            let mut s = shared.lock();
            loop {
                if s.failure.is_some() || s.finished == job.own {
                    return;
                }
                if let Some(Reverse(id)) = s.ready.pop() {
                    s.running += 1;
                    // The workers neither running a task nor about to take a ready one.
                    let idle = workers.saturating_sub(s.running + s.ready.len());
                    break (TaskId(id), idle);
                }
                if s.running == 0 && s.arrivals_left == 0 {
                    // Unreachable for a graph built by `TaskGraph::push` (dependencies point
                    // backwards), but never wait for nothing.
                    let first =
                        (0..s.waiting.len()).position(|t| s.waiting[t] > 0 && job.roles[t] == Role::Run).unwrap_or(0);
                    s.failure = Some(BackendError::Task {
                        task: TaskId(first as u32),
                        label: graph.nodes().get(first).map_or_else(String::new, |node| node.label.clone()),
                        reason: "its dependencies can never finish".into(),
                    });
                    shared.wake.notify_all();
                    return;
                }
                s = shared.wake.wait(s).unwrap_or_else(|e| e.into_inner());
            }
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| intra_op::with_helpers(helpers, || run(id, me))));
        let label = || graph.nodes()[id.0 as usize].label.clone();
        let mut s = shared.lock();
        s.running -= 1;
        match outcome {
            Ok(Ok(())) => shared.finish(&mut s, id.0 as usize, job.dependents, job.roles),
            Ok(Err(e)) => {
                s.failure.get_or_insert(e);
            }
            Err(payload) => {
                s.failure.get_or_insert(BackendError::Panic { task: id, label: label(), message: message(&*payload) });
            }
        }
        // Wake idle workers: there may be new ready tasks, or the run is over.
        shared.wake.notify_all();
    }
}

/// The message a panic carried (`panic!("...")` gives a `&str` or a `String`).
fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic payload that is not a string)".into()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use einsum_core::{
        DType, TensorType,
        taskgraph::{Boundary, DeviceId, Task},
    };

    use super::*;

    /// A layered graph: 4 loads (of 4 inputs), then layers of slices, each reading two random buffers of
    /// the layer before (extra dependency on the second).
    fn layered(layers: usize) -> TaskGraph {
        let whole = TensorType::zero_bounded(&[2]);
        let x = |i: usize| Boundary { name: format!("x{i}"), ty: whole.clone(), dtype: DType::F32 };
        let mut g = TaskGraph::new(1, (0..4).map(x).collect(), Vec::new());
        let mut prev = Vec::new();
        for input in 0..4 {
            let b = g.add_buffer(DeviceId(0), whole.clone(), DType::F32);
            prev.push((g.push(Task::Load { input, dst: b }, &[], "load").unwrap(), b));
        }
        let mut rng = einsum_core::SeededRng::new(9);
        for _ in 0..layers {
            let mut next = Vec::new();
            for _ in 0..4 {
                let (_, src) = prev[rng.below(4)];
                let (extra, _) = prev[rng.below(4)];
                let b = g.add_buffer(DeviceId(0), whole.clone(), DType::F32);
                next.push((g.push(Task::Slice { src, dst: b }, &[extra], "slice").unwrap(), b));
            }
            prev = next;
        }
        g
    }

    #[test]
    fn tasks_start_after_their_dependencies_finish() {
        let g = layered(30);
        for threads in [1, 2, 4, 8] {
            let clock = AtomicUsize::new(1);
            let finished: Vec<AtomicUsize> = (0..g.nodes().len()).map(|_| AtomicUsize::new(0)).collect();
            let started: Vec<AtomicUsize> = (0..g.nodes().len()).map(|_| AtomicUsize::new(0)).collect();
            run_all(&g, threads, |id, _| {
                started[id.0 as usize].store(clock.fetch_add(1, Ordering::SeqCst), Ordering::SeqCst);
                finished[id.0 as usize].store(clock.fetch_add(1, Ordering::SeqCst), Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
            for (i, node) in g.nodes().iter().enumerate() {
                let start = started[i].load(Ordering::SeqCst);
                assert!(start > 0, "task {i} ran");
                for d in &node.deps {
                    assert!(finished[d.0 as usize].load(Ordering::SeqCst) < start, "task {i} before {d}");
                }
            }
            if threads == 1 {
                let order: Vec<usize> = started.iter().map(|s| s.load(Ordering::SeqCst)).collect();
                assert!(order.windows(2).all(|w| w[0] < w[1]), "one thread runs in schedule order");
            }
        }
    }

    #[test]
    fn no_task_starts_after_a_failure_on_one_thread() {
        let g = layered(5);
        let ran = AtomicUsize::new(0);
        let err = run_all(&g, 1, |id, _| {
            ran.fetch_add(1, Ordering::SeqCst);
            if id.0 == 7 { Err(BackendError::Unavailable("seven".into())) } else { Ok(()) }
        })
        .unwrap_err();
        assert_eq!(err, BackendError::Unavailable("seven".into()));
        assert_eq!(ran.load(Ordering::SeqCst), 8);
    }

    #[test]
    fn panics_with_any_payload_are_caught() {
        let g = layered(2);
        for threads in [1, 4] {
            let err = run_all(&g, threads, |id, _| {
                if id.0 == 5 {
                    std::panic::panic_any(5u8);
                }
                Ok(())
            })
            .unwrap_err();
            assert_eq!(
                err,
                BackendError::Panic {
                    task: TaskId(5),
                    label: "slice".into(),
                    message: "(a panic payload that is not a string)".into()
                }
            );
        }
    }

    /// A chain (each task the only one ready) is lent every other worker; in a wide layer,
    /// where ready tasks outnumber the workers, none is.
    #[test]
    fn idle_workers_are_lent_to_the_running_task() {
        let whole = TensorType::zero_bounded(&[2]);
        let mut chain =
            TaskGraph::new(1, vec![Boundary { name: "x".into(), ty: whole.clone(), dtype: DType::F32 }], Vec::new());
        let mut prev = chain.add_buffer(DeviceId(0), whole.clone(), DType::F32);
        chain.push(Task::Load { input: 0, dst: prev }, &[], "load").unwrap();
        for _ in 0..5 {
            let b = chain.add_buffer(DeviceId(0), whole.clone(), DType::F32);
            chain.push(Task::Slice { src: prev, dst: b }, &[], "slice").unwrap();
            prev = b;
        }
        for threads in [1, 3] {
            let seen = Mutex::new(Vec::new());
            run_all(&chain, threads, |_, _| {
                seen.lock().unwrap().push(intra_op::helpers());
                Ok(())
            })
            .unwrap();
            assert_eq!(seen.into_inner().unwrap(), vec![threads - 1; 6]);
        }
        // 4 loads ready at once on 2 workers: the first task taken leaves 3 ready.
        let wide = layered(0);
        let first = Mutex::new(None);
        run_all(&wide, 2, |_, _| {
            first.lock().unwrap().get_or_insert(intra_op::helpers());
            Ok(())
        })
        .unwrap();
        assert_eq!(first.into_inner().unwrap(), Some(0));
    }

    #[test]
    fn an_empty_graph_runs_at_once() {
        let g = TaskGraph::new(2, Vec::new(), Vec::new());
        run_all(&g, 4, |_, _| unreachable!("no tasks")).unwrap();
    }
}
