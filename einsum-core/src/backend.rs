//! The backend contract: run a [`TaskGraph`] on some devices.

use std::{any::Any, fmt, sync::Arc};

use crate::{
    DType, HostTensor, TensorType,
    taskgraph::{DeviceId, TaskGraph, TaskId, check_inputs},
};

/// When one task of a run ran, as measured by a backend that records task timings
/// ([`Prepared::record_task_timings`]): for a timeline of the run beside the simulator's
/// prediction (`--trace` on `einsummable run`).
///
/// Times are seconds from one origin taken when the run began, so the tasks of one run can
/// be laid side by side; they measure the host's wall clock around the task's work.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskTiming {
    /// The task, in the graph the backend prepared (which may differ from the compiled one
    /// where the backend fused tasks).
    pub task: TaskId,
    /// The task's label in that graph (it names the operator or exchange it belongs to).
    pub label: String,
    /// The task's kind ([`Task::kind`](crate::taskgraph::Task::kind): `kernel`, `transfer`, ...).
    pub kind: &'static str,
    /// The device it ran on: that of the first buffer it writes (a store's: the one it reads).
    pub device: DeviceId,
    /// The backend's worker thread that ran it (0-based).
    pub worker: usize,
    /// When it started, in seconds from the run's origin.
    pub start: f64,
    /// When it ended, in seconds from the run's origin (at least `start`).
    pub end: f64,
}

/// The concrete kernels a task graph's `Kernel` tasks name, by index.
///
/// # Design
/// The task graph is backend- and operator-independent: a kernel task names an index, and
/// whoever compiled the graph (it knows the operators) supplies the library. A backend
/// brings its own memory and scheduling; a CPU backend can run the operators' reference
/// kernels through this trait, a GPU backend maps indices to its own kernels.
pub trait KernelLibrary: Send + Sync {
    /// Runs kernel `kernel` on the input blocks, producing blocks of the given types and
    /// dtypes (in absolute coordinates). An error says what went wrong.
    fn run(
        &self,
        kernel: usize,
        inputs: &[HostTensor],
        outputs: &[(TensorType, DType)],
    ) -> Result<Vec<HostTensor>, String>;

    /// A readable name of kernel `kernel`, for error messages.
    fn name(&self, kernel: usize) -> String;

    /// The operator and blocks of kernel `kernel`, for a backend that compiles its own
    /// kernels (`None`: the library does not say, or there is no such kernel; such a backend
    /// then refuses the graph).
    fn info(&self, kernel: usize) -> Option<KernelInfo<'_>> {
        let _ = kernel;
        None
    }
}

/// A borrowed library is a library, so `Arc::new(&library)` can be handed to
/// [`Backend::prepare`].
impl<K: KernelLibrary + ?Sized> KernelLibrary for &K {
    fn run(
        &self,
        kernel: usize,
        inputs: &[HostTensor],
        outputs: &[(TensorType, DType)],
    ) -> Result<Vec<HostTensor>, String> {
        (**self).run(kernel, inputs, outputs)
    }

    fn name(&self, kernel: usize) -> String {
        (**self).name(kernel)
    }

    fn info(&self, kernel: usize) -> Option<KernelInfo<'_>> {
        (**self).info(kernel)
    }
}

/// A shared library is a library, so a fused library can own the one it wraps.
impl<K: KernelLibrary + ?Sized> KernelLibrary for Arc<K> {
    fn run(
        &self,
        kernel: usize,
        inputs: &[HostTensor],
        outputs: &[(TensorType, DType)],
    ) -> Result<Vec<HostTensor>, String> {
        (**self).run(kernel, inputs, outputs)
    }

    fn name(&self, kernel: usize) -> String {
        (**self).name(kernel)
    }

    fn info(&self, kernel: usize) -> Option<KernelInfo<'_>> {
        (**self).info(kernel)
    }
}

/// Why a run failed. A run either returns every saved output or one of these.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BackendError {
    /// A computation input that is missing or does not match its declared type.
    #[error("input {index} (`{name}`): {reason}")]
    Input {
        /// Its index.
        index: usize,
        /// Its name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A run of a prepared executable before computation input `index` was loaded.
    #[error("input {index} (`{name}`) was never loaded; load every input before running")]
    NotLoaded {
        /// Its index.
        index: usize,
        /// Its name.
        name: String,
    },
    /// A task that failed (a kernel error, an inconsistent block).
    #[error("{task} `{label}` failed: {reason}")]
    Task {
        /// The task.
        task: TaskId,
        /// Its label.
        label: String,
        /// Why.
        reason: String,
    },
    /// A worker that panicked while running a task.
    #[error("{task} `{label}` panicked: {message}")]
    Panic {
        /// The task.
        task: TaskId,
        /// Its label.
        label: String,
        /// The panic message.
        message: String,
    },
    /// The backend cannot run here (no GPU, not compiled in, ...).
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// An operator the backend has no kernel for (found before any device is touched).
    #[error("the {backend} backend has no kernel for operator `{operator}` (kind `{kind}`)")]
    Unsupported {
        /// The backend's name.
        backend: String,
        /// The operator's vertex name.
        operator: String,
        /// Its kind.
        kind: String,
    },
    /// A device call that failed (a driver, compiler or library call while preparing,
    /// loading or running).
    #[error("{operation} failed: {reason}")]
    Device {
        /// What was being done (`CUDA setup`, `CUDA run`, `loading input 2`, ...).
        operation: String,
        /// The device's error.
        reason: String,
    },
}

/// An operator as a backend sees it, for [`Backend::check_operator`] and
/// [`KernelInfo::operator`].
///
/// # Design
/// This crate knows no operator, so the operator is an `&dyn Any`: a backend that brings
/// its own kernels finds one by the value's concrete type (its `TypeId`) and downcasts to
/// read the operator's parameters; the name and kind are for messages.
#[derive(Clone, Copy)]
pub struct OperatorRef<'a> {
    /// The operator value (its concrete type, e.g. `einsum_ops::unary::Unary`).
    pub value: &'a dyn Any,
    /// The operator's vertex name in its computation.
    pub name: &'a str,
    /// Its kind (`einsum`, `softmax`, a custom operator's own kind, ...).
    pub kind: &'a str,
}

impl fmt::Debug for OperatorRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperatorRef").field("name", &self.name).field("kind", &self.kind).finish()
    }
}

/// One kernel of a [`KernelLibrary`], described for a backend that compiles its own
/// kernels instead of calling [`KernelLibrary::run`] (the CUDA backend).
#[derive(Clone, Copy, Debug)]
pub struct KernelInfo<'a> {
    /// The operator the kernel computes.
    pub operator: OperatorRef<'a>,
    /// The input blocks one call reads, in absolute coordinates (its function spec).
    pub inputs: &'a [TensorType],
    /// The output blocks it writes.
    pub outputs: &'a [TensorType],
}

/// A task graph prepared on a backend: its computation inputs are loaded once and stay
/// resident on their devices, and it runs any number of times on them.
///
/// # Design
/// Inputs (weights) do not change between runs, so moving their blocks onto the devices
/// belongs to loading, not to running; and what depends only on the graph (compiled
/// kernels, memory plans, a captured CUDA graph) belongs to preparing. A run then costs only
/// the computation. Every method returns a typed [`BackendError`]. A prepared executable is
/// `Send`: it may move to another thread (a server's worker, a binding's), though not be
/// shared by two at once.
pub trait Prepared: Send {
    /// Gives computation input `input` (its index in the graph's inputs) the value `value`
    /// (the whole tensor): checks its type and dtype ([`BackendError::Input`] naming the
    /// input otherwise) and places its blocks on their devices, replacing any earlier value.
    fn load(&mut self, input: usize, value: &HostTensor) -> Result<(), BackendError>;

    /// Loads every input: `inputs` are the whole computation inputs in the graph's order.
    fn load_all(&mut self, inputs: &[HostTensor]) -> Result<(), BackendError> {
        for (i, value) in inputs.iter().enumerate() {
            self.load(i, value)?;
        }
        Ok(())
    }

    /// Overwrites the elements of loaded input `input` that `part` covers (its type a
    /// projection of the input's, its dtype the input's) on every device block that holds
    /// them (a replicated block on each of its devices); other elements keep their values.
    /// The cost is the part's, not the input's: a key-value cache resident on the devices
    /// gets one new row per generated token this way. Fails with [`BackendError::Input`] for
    /// an unknown input or a part of another type or dtype, and with
    /// [`BackendError::NotLoaded`] for an input not loaded yet, touching nothing.
    ///
    /// # Design
    /// No default: the only general one, loading the whole value again, needs the whole
    /// value, which the caller of a part may not hold, and would cost the input's size.
    fn write(&mut self, input: usize, part: &HostTensor) -> Result<(), BackendError>;

    /// Runs once on the loaded inputs and returns the saved outputs (whole tensors, in the
    /// graph's output order). An input never loaded is an error naming it.
    fn run(&mut self) -> Result<Vec<HostTensor>, BackendError>;

    /// The device time of the last successful [`Prepared::run`] in seconds, where the backend
    /// measures one apart from the host's wall time (the CUDA backend: events around the
    /// launch); `None` (the default) where it does not, or before the first run.
    fn last_run_device_seconds(&self) -> Option<f64> {
        None
    }

    /// Asks the backend to record, on every later run, when each task ran
    /// ([`TaskTiming`]), or (`on` false) to stop. Returns whether it records them: the
    /// default records nothing and returns false. Off by default, so that a run pays for the
    /// clock reads only when asked.
    fn record_task_timings(&mut self, on: bool) -> bool {
        let _ = on;
        false
    }

    /// The task timings of the last successful [`Prepared::run`], taken (a second call
    /// returns `None`); `None` where the backend does not record them or was not asked to
    /// ([`Prepared::record_task_timings`]).
    fn take_task_timings(&mut self) -> Option<Vec<TaskTiming>> {
        None
    }

    /// The parts of input `input` this executable keeps, where it keeps less than the whole
    /// value (a rank of a multi-process job keeps its own devices' blocks); `None` (the
    /// default) where it needs the whole. A caller that can read parts (of a checkpoint)
    /// reads just these and hands them to [`Prepared::load_parts`].
    fn needed_parts(&self, input: usize) -> Option<Vec<TensorType>> {
        let _ = input;
        None
    }

    /// Loads input `input` from `parts`, which together cover every part
    /// [`Prepared::needed_parts`] lists (each a projection of the input's type, in its dtype),
    /// replacing any earlier value. Fails with [`BackendError::Input`] where a needed part is
    /// not covered, and by default (an executable that needs whole values) always.
    fn load_parts(&mut self, input: usize, parts: &[HostTensor]) -> Result<(), BackendError> {
        let _ = parts;
        Err(BackendError::Input {
            index: input,
            name: String::new(),
            reason: "this backend loads whole inputs only (it lists no needed parts)".into(),
        })
    }
}

/// Runs task graphs: the contract every backend (CPU, CUDA) implements, so that a driver
/// holds a `Box<dyn Backend>` chosen by value and a `Box<dyn Prepared>` from it.
///
/// # Design
/// Prepare once, load inputs once, run many ([`Prepared`]). A backend gets the graph and
/// the [`KernelLibrary`] its `Kernel` tasks name, owned by the prepared executable for its
/// lifetime `'k`: the CPU backend calls the library's host kernels on every run, the CUDA
/// backend reads [`KernelLibrary::info`] at prepare time to pick its own kernels by
/// operator type. Which operators a backend can run is asked before any planning
/// ([`Backend::check_operator`]), so a graph the backend cannot run is refused at compile
/// time, naming the operator.
pub trait Backend: Send + Sync {
    /// The backend's name (`cpu`, `cuda`).
    fn name(&self) -> &str;

    /// Fails with [`BackendError::Unavailable`] when the backend cannot run on this machine
    /// (no GPU, no driver); the default says it always can.
    fn check_available(&self) -> Result<(), BackendError> {
        Ok(())
    }

    /// Fails with [`BackendError::Unsupported`] naming `operator` when this backend has no
    /// kernel for it. Needs no device, so a driver calls it before planning. The default
    /// refuses nothing (a backend that runs every operator's own host kernel).
    fn check_operator(&self, operator: OperatorRef<'_>) -> Result<(), BackendError> {
        let _ = operator;
        Ok(())
    }

    /// Host bytes a prepared executable of `graph` needs beyond the caller's own input
    /// values (device memory that is host memory, staging copies), so that a driver can
    /// refuse a run too large for the machine before anything is allocated.
    fn host_bytes(&self, graph: &TaskGraph) -> usize;

    /// Prepares `graph`, whose `Kernel` tasks run `kernels`, for repeated runs: an
    /// executable that holds no input yet.
    fn prepare<'k>(
        &self,
        graph: &TaskGraph,
        kernels: Arc<dyn KernelLibrary + 'k>,
    ) -> Result<Box<dyn Prepared + 'k>, BackendError>;

    /// Runs `graph` once with the given computation inputs (whole tensors, in the graph's
    /// input order) and returns the saved outputs (whole tensors, in the graph's output
    /// order): prepare, load every input, run.
    fn execute(
        &self,
        graph: &TaskGraph,
        kernels: &dyn KernelLibrary,
        inputs: &[HostTensor],
    ) -> Result<Vec<HostTensor>, BackendError> {
        check_inputs(graph, inputs)?;
        let mut exe = self.prepare(graph, Arc::new(kernels))?;
        exe.load_all(inputs)?;
        exe.run()
    }
}
