//! Kernel fusion on the task graph, shared by the backends: where a kernel task's only
//! output is read by a kernel task on the same device that a [`Rule`] can fuse it with, the
//! pair becomes one kernel task and the intermediate buffer disappears, or, when it has
//! later readers and the rule can write it, is written by the fused task.
//!
//! # Design
//! The rewrite is on the task graph, not on a backend's lowered operations, because memory
//! plans and schedules are made from the task graph: a fused task is an ordinary kernel
//! task, so a dropped intermediate is never allocated and buffer lifetimes stay exact. This
//! module knows no operator: the patterns are data ([`Rule`]s, each a function of the two
//! kernels' [`KernelInfo`]s), and each backend brings its own — the CUDA backend's rules
//! make operators it lowers to fused CUDA kernels, the CPU backend's (from `einsum-ops`)
//! make operators with a one-pass host kernel ([`FusedOp::run`]).
//!
//! [`FusedKernels`] wraps the kernel library and appends one kernel id per fused task,
//! whose [`KernelLibrary::info`] is the fused operator; its [`KernelLibrary::run`] runs the
//! fused operator's own host kernel where it has one, else the two original kernels in
//! turn, so the wrapped library is always a complete library. A fused kernel is described
//! like any other, so a rule may fuse it again: running the pass until nothing changes
//! (as the CPU backend does) turns a chain of kernels into one task.
//!
//! A pair is fused when: both are kernel tasks the library describes; the first has exactly
//! one output, read exactly once by the second; every buffer of both has one dtype and one
//! device; no task between them depends on the first; and the intermediate has no other
//! reader, or the rule writes it too and every other reader comes after the second. The
//! fused task takes the second's place in the schedule (all of its inputs are written by
//! then), reads the first's inputs then the second's others, and writes the second's
//! outputs then, if kept, the intermediate. In one pass a task joins at most one pair.

use std::any::Any;

use super::{BufferId, Node, Task, TaskGraph, TaskGraphError, TaskId};
use crate::{DType, HostTensor, KernelInfo, KernelLibrary, OperatorRef, TensorType};

/// An operator a [`Rule`] makes from two kernels.
pub trait FusedOp: Any + Send + Sync {
    /// Runs the fused kernel on the host in one pass: `inputs` are the fused task's input
    /// blocks, `outputs` the types and dtypes of its output blocks. `None` (the default)
    /// when the operator has no host kernel of its own (a CUDA fusion, whose host run is
    /// the two original kernels in turn).
    fn run(&self, inputs: &[HostTensor], outputs: &[(TensorType, DType)]) -> Option<Result<Vec<HostTensor>, String>> {
        let _ = (inputs, outputs);
        None
    }
}

/// A fused operator value, as a kernel description hands it to a backend.
pub type FusedOperator = Box<dyn FusedOp>;

/// Two adjacent kernels as a rule sees them: the first (its result is the intermediate),
/// the second, and which of the second's inputs the intermediate is.
#[derive(Clone, Copy, Debug)]
pub struct Pair<'a> {
    /// The first kernel.
    pub first: KernelInfo<'a>,
    /// The second kernel.
    pub second: KernelInfo<'a>,
    /// The position of the intermediate among the second's inputs.
    pub operand: usize,
    /// The element type of every buffer of both.
    pub dtype: DType,
}

/// One fusion pattern.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    /// The fused operator's kind (for names and messages).
    pub kind: &'static str,
    /// Whether the fused kernel can also write the intermediate, so that the pair is fused
    /// even when later tasks read it.
    pub keeps_intermediate: bool,
    /// The fused operator for `pair`, or `None` when this rule does not apply to it.
    pub fuse: fn(&Pair<'_>) -> Option<FusedOperator>,
}

/// One fused kernel: its operator and blocks, and how to run it as the two original kernels.
struct Fused {
    operator: FusedOperator,
    kind: &'static str,
    name: String,
    inputs: Vec<TensorType>,
    outputs: Vec<TensorType>,
    first: usize,
    second: usize,
    /// Inputs of the first kernel (the fused kernel's first inputs).
    first_inputs: usize,
    operand: usize,
    /// The intermediate's block and dtype.
    mid: (TensorType, DType),
    keep: bool,
}

/// A kernel library with the fused kernels appended: ids below `first_fused` are the
/// wrapped library's (`L`, owned or borrowed), `first_fused + i` is fused kernel `i`.
pub struct FusedKernels<L> {
    base: L,
    first_fused: usize,
    fused: Vec<Fused>,
}

impl<L> FusedKernels<L> {
    fn fused(&self, kernel: usize) -> Option<&Fused> {
        kernel.checked_sub(self.first_fused).and_then(|i| self.fused.get(i))
    }
}

impl<L: KernelLibrary> KernelLibrary for FusedKernels<L> {
    /// A fused kernel runs its operator's host kernel where it has one; otherwise the first
    /// kernel, then the second on its result (rounded to the storage dtype in between, as
    /// unfused). The others run in the wrapped library.
    fn run(
        &self,
        kernel: usize,
        inputs: &[HostTensor],
        outputs: &[(TensorType, DType)],
    ) -> Result<Vec<HostTensor>, String> {
        let Some(f) = self.fused(kernel) else {
            return self.base.run(kernel, inputs, outputs);
        };
        let want = f.inputs.len();
        if inputs.len() != want || outputs.len() != f.outputs.len() {
            return Err(format!(
                "fused kernel {}: {} inputs and {} outputs, expected {want} and {}",
                f.name,
                inputs.len(),
                outputs.len(),
                f.outputs.len()
            ));
        }
        if let Some(result) = f.operator.run(inputs, outputs) {
            return result.map_err(|e| format!("{}: {e}", f.name));
        }
        let mid = self.base.run(f.first, &inputs[..f.first_inputs], std::slice::from_ref(&f.mid))?;
        let mid = mid.into_iter().next().ok_or_else(|| format!("{} returned no output", self.base.name(f.first)))?;
        let mut second: Vec<HostTensor> = inputs[f.first_inputs..].to_vec();
        second.insert(f.operand, mid);
        let n = outputs.len() - usize::from(f.keep);
        let mut outs = self.base.run(f.second, &second, &outputs[..n])?;
        if f.keep {
            outs.push(second.swap_remove(f.operand));
        }
        Ok(outs)
    }

    fn name(&self, kernel: usize) -> String {
        match self.fused(kernel) {
            Some(f) => f.name.clone(),
            None => self.base.name(kernel),
        }
    }

    fn info(&self, kernel: usize) -> Option<KernelInfo<'_>> {
        let Some(f) = self.fused(kernel) else {
            return self.base.info(kernel);
        };
        let value: &dyn Any = f.operator.as_ref();
        Some(KernelInfo {
            operator: OperatorRef { value, name: &f.name, kind: f.kind },
            inputs: &f.inputs,
            outputs: &f.outputs,
        })
    }
}

/// A task graph after fusion, with the library its kernel tasks run.
pub struct Fusion<L> {
    /// The rewritten graph.
    pub graph: TaskGraph,
    /// The wrapped library (the fused kernels appended).
    pub kernels: FusedKernels<L>,
}

impl<L> Fusion<L> {
    /// Number of fused tasks.
    pub fn fused(&self) -> usize {
        self.kernels.fused.len()
    }
}

/// A pair found fusable: the first task, the intermediate's position among the second's
/// inputs, and the fused kernel.
struct Plan {
    first: usize,
    operand: usize,
    kernel: Fused,
}

/// Fuses every pair of `graph`'s kernel tasks that one of `rules` applies to, once (see the
/// module docs); `kernels` is the library the graph's kernel tasks run, which the result
/// wraps. A graph with nothing to fuse comes back unchanged. Fails only if the rewritten
/// graph is refused by [`TaskGraph::push`], which would be a bug of this pass.
pub fn fuse_with<L: KernelLibrary>(graph: &TaskGraph, kernels: L, rules: &[Rule]) -> Result<Fusion<L>, TaskGraphError> {
    let nodes = graph.nodes();
    let first_fused = nodes
        .iter()
        .filter_map(|n| match n.task {
            Task::Kernel { kernel, .. } => Some(kernel + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let mut plans = find_pairs(graph, &kernels, rules);
    // Rebuild: every buffer but the dropped intermediates, every task but the fused firsts.
    let mut dropped = vec![false; graph.buffers().len()];
    let mut absorbed = vec![false; nodes.len()];
    for p in plans.iter().flatten() {
        absorbed[p.first] = true;
        if !p.kernel.keep {
            dropped[intermediate(&nodes[p.first]).0 as usize] = true;
        }
    }
    let mut out = TaskGraph::new(graph.devices(), graph.inputs().to_vec(), graph.outputs().to_vec());
    let buffers: Vec<Option<BufferId>> = graph
        .buffers()
        .iter()
        .enumerate()
        .map(|(i, b)| (!dropped[i]).then(|| out.add_buffer(b.device, b.ty.clone(), b.dtype)))
        .collect();
    let buf = |b: &BufferId| buffers[b.0 as usize].expect("a dropped intermediate is read only by its fused task");
    let bufs = |bs: &[BufferId]| bs.iter().map(buf).collect::<Vec<_>>();
    let mut ids: Vec<Option<TaskId>> = vec![None; nodes.len()];
    let mut fused = Vec::new();
    for (t, node) in nodes.iter().enumerate() {
        if absorbed[t] {
            continue;
        }
        let (task, deps, label, first) = match plans[t].take() {
            Some(plan) => {
                let first = &nodes[plan.first];
                let (
                    Task::Kernel { inputs: a_in, outputs: a_out, .. },
                    Task::Kernel { inputs: b_in, outputs: b_out, .. },
                ) = (&first.task, &node.task)
                else {
                    unreachable!("a fused pair is two kernel tasks");
                };
                let mut inputs = bufs(a_in);
                inputs.extend(b_in.iter().enumerate().filter(|(i, _)| *i != plan.operand).map(|(_, b)| buf(b)));
                let mut outputs = bufs(b_out);
                if plan.kernel.keep {
                    outputs.push(buf(&a_out[0]));
                }
                let task = Task::Kernel { kernel: first_fused + fused.len(), inputs, outputs };
                let deps: Vec<TaskId> =
                    first.deps.iter().chain(&node.deps).filter(|d| d.0 as usize != plan.first).copied().collect();
                fused.push(plan.kernel);
                (task, deps, format!("{} + {}", first.label, node.label), Some(plan.first))
            }
            None => (remap(&node.task, &buf), node.deps.clone(), node.label.clone(), None),
        };
        // A fused task may stand for both of a task's dependencies: name it once.
        let mut deps_out: Vec<TaskId> = Vec::with_capacity(deps.len());
        for d in &deps {
            let d = ids[d.0 as usize].expect("dependencies come first");
            if !deps_out.contains(&d) {
                deps_out.push(d);
            }
        }
        let deps = deps_out;
        let id = out.push(task, &deps, label)?;
        ids[t] = Some(id);
        // The absorbed first task now stands for the fused one: its later dependents wait
        // for the fused task.
        if let Some(f) = first {
            ids[f] = Some(id);
        }
    }
    Ok(Fusion { graph: out, kernels: FusedKernels { base: kernels, first_fused, fused } })
}

/// The pairs to fuse (see the module docs), by second task: `graph`'s tasks are scanned in
/// schedule order, and a task not yet in a pair becomes the second of the pair one of `rules`
/// fuses, if any.
fn find_pairs<L: KernelLibrary>(graph: &TaskGraph, kernels: &L, rules: &[Rule]) -> Vec<Option<Plan>> {
    let nodes = graph.nodes();
    let mut plans: Vec<Option<Plan>> = (0..nodes.len()).map(|_| None).collect();
    let mut scan = Scan {
        graph,
        kernels,
        rules,
        readers: vec![Vec::new(); graph.buffers().len()],
        dependents: vec![Vec::new(); nodes.len()],
    };
    for (t, n) in nodes.iter().enumerate() {
        for b in n.task.reads() {
            scan.readers[b.0 as usize].push(t);
        }
        for d in &n.deps {
            scan.dependents[d.0 as usize].push(t);
        }
    }
    let mut taken = vec![false; nodes.len()];
    for b in 0..nodes.len() {
        if taken[b] {
            continue;
        }
        let Some(plan) = scan.pair(&taken, b) else {
            continue;
        };
        taken[b] = true;
        taken[plan.first] = true;
        plans[b] = Some(plan);
    }
    plans
}

/// The only output of a fusable first task.
fn intermediate(node: &Node) -> BufferId {
    match &node.task {
        Task::Kernel { outputs, .. } => outputs[0],
        _ => unreachable!("a fused first task is a kernel task"),
    }
}

/// `task` with its buffers renamed by `buf`.
fn remap(task: &Task, buf: &impl Fn(&BufferId) -> BufferId) -> Task {
    let bufs = |bs: &[BufferId]| bs.iter().map(buf).collect::<Vec<_>>();
    match task {
        Task::Load { input, dst } => Task::Load { input: *input, dst: buf(dst) },
        Task::Slice { src, dst } => Task::Slice { src: buf(src), dst: buf(dst) },
        Task::Transfer { src, dst } => Task::Transfer { src: buf(src), dst: buf(dst) },
        Task::Aggregate { srcs, dst, agg } => Task::Aggregate { srcs: bufs(srcs), dst: buf(dst), agg: *agg },
        Task::Stitch { srcs, dst } => Task::Stitch { srcs: bufs(srcs), dst: buf(dst) },
        Task::Kernel { kernel, inputs, outputs } => {
            Task::Kernel { kernel: *kernel, inputs: bufs(inputs), outputs: bufs(outputs) }
        }
        Task::Store { output, src } => Task::Store { output: *output, src: buf(src) },
    }
}

/// What the pass knows of the graph while it looks for pairs.
struct Scan<'g, L> {
    graph: &'g TaskGraph,
    kernels: &'g L,
    rules: &'g [Rule],
    /// The tasks reading each buffer, in schedule order (a task once per read).
    readers: Vec<Vec<usize>>,
    /// The tasks naming each task among their dependencies.
    dependents: Vec<Vec<usize>>,
}

impl<L: KernelLibrary> Scan<'_, L> {
    /// The pair whose second task is `b`, if one of the rules fuses it (see the module docs
    /// for the conditions); `taken` marks the tasks already in a pair.
    fn pair(&self, taken: &[bool], b: usize) -> Option<Plan> {
        let graph = self.graph;
        let Task::Kernel { kernel: kb, inputs: b_in, .. } = &graph.nodes()[b].task else {
            return None;
        };
        for (operand, m) in b_in.iter().enumerate() {
            let a = graph.writer(*m)?.0 as usize;
            let Task::Kernel { kernel: ka, inputs: a_in, outputs: a_out } = &graph.nodes()[a].task else {
                continue;
            };
            if taken[a] || a_out.len() != 1 || b_in.iter().filter(|x| *x == m).count() != 1 {
                continue;
            }
            let (Some(first), Some(second)) = (self.kernels.info(*ka), self.kernels.info(*kb)) else {
                continue;
            };
            let b_out = graph.nodes()[b].task.writes();
            let (dtype, device) = (graph.buffer(*m).dtype, graph.buffer(*m).device);
            if a_in
                .iter()
                .chain(b_in)
                .chain(&b_out)
                .any(|x| graph.buffer(*x).dtype != dtype || graph.buffer(*x).device != device)
            {
                continue;
            }
            if self.dependents[a].iter().any(|&t| t != b && t < b) {
                continue;
            }
            let others: Vec<usize> = self.readers[m.0 as usize].iter().copied().filter(|&t| t != b).collect();
            let pair = Pair { first, second, operand, dtype };
            for rule in self.rules {
                let keep = !others.is_empty();
                if keep && (!rule.keeps_intermediate || others.iter().any(|&t| t < b)) {
                    continue;
                }
                let Some(operator) = (rule.fuse)(&pair) else {
                    continue;
                };
                let mut inputs: Vec<TensorType> = first.inputs.to_vec();
                inputs.extend(second.inputs.iter().enumerate().filter(|(i, _)| *i != operand).map(|(_, t)| t.clone()));
                let mut outputs = second.outputs.to_vec();
                if keep {
                    outputs.push(first.outputs[0].clone());
                }
                let kernel = Fused {
                    operator,
                    kind: rule.kind,
                    name: format!("{} ({} then {})", rule.kind, self.kernels.name(*ka), self.kernels.name(*kb)),
                    inputs,
                    outputs,
                    first: *ka,
                    second: *kb,
                    first_inputs: first.inputs.len(),
                    operand,
                    mid: (first.outputs[0].clone(), dtype),
                    keep,
                };
                return Some(Plan { first: a, operand, kernel });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taskgraph::{Boundary, DeviceId, interpret};

    /// Kernel `k` multiplies its one input by `k + 2`; every kernel is described (as its
    /// factor), so a rule can fuse any two into one multiplication.
    struct Scale {
        blocks: Vec<TensorType>,
    }

    /// The fused operator: one multiplication by the product of the factors.
    struct Product(f32);

    impl FusedOp for Product {
        fn run(
            &self,
            inputs: &[HostTensor],
            outputs: &[(TensorType, DType)],
        ) -> Option<Result<Vec<HostTensor>, String>> {
            let data = inputs[0].to_f32().iter().map(|x| self.0 * x).collect();
            Some(
                HostTensor::from_f32(outputs[0].0.clone(), outputs[0].1, data)
                    .map(|t| vec![t])
                    .map_err(|e| e.to_string()),
            )
        }
    }

    impl KernelLibrary for Scale {
        fn run(
            &self,
            k: usize,
            inputs: &[HostTensor],
            outputs: &[(TensorType, DType)],
        ) -> Result<Vec<HostTensor>, String> {
            Product(k as f32 + 2.0).run(inputs, outputs).expect("a host kernel")
        }
        fn name(&self, k: usize) -> String {
            format!("×{}", k + 2)
        }
        fn info(&self, k: usize) -> Option<KernelInfo<'_>> {
            const FACTORS: [f32; 3] = [2.0, 3.0, 4.0];
            let value: &dyn Any = FACTORS.get(k)?;
            let operator = OperatorRef { value, name: "scale", kind: "scale" };
            Some(KernelInfo { operator, inputs: &self.blocks, outputs: &self.blocks })
        }
    }

    /// A factor of a kernel or of a fused product.
    fn factor(info: &KernelInfo<'_>) -> Option<f32> {
        let v = info.operator.value;
        v.downcast_ref::<f32>().copied().or_else(|| v.downcast_ref::<Product>().map(|p| p.0))
    }

    const RULES: [Rule; 1] = [Rule {
        kind: "product",
        keeps_intermediate: false,
        fuse: |p| Some(Box::new(Product(factor(&p.first)? * factor(&p.second)?))),
    }];

    /// `x ×2 ×3 ×4`, the second result also saved when `saved_mid`.
    fn chain(saved_mid: bool) -> TaskGraph {
        let ty = TensorType::zero_bounded(&[4]);
        let io = |n: &str| Boundary { name: n.into(), ty: ty.clone(), dtype: DType::F32 };
        let outputs = if saved_mid { vec![io("y"), io("mid")] } else { vec![io("y")] };
        let mut g = TaskGraph::new(1, vec![io("x")], outputs);
        let b: Vec<BufferId> = (0..4).map(|_| g.add_buffer(DeviceId(0), ty.clone(), DType::F32)).collect();
        g.push(Task::Load { input: 0, dst: b[0] }, &[], "load").unwrap();
        for k in 0..3 {
            g.push(Task::Kernel { kernel: k, inputs: vec![b[k]], outputs: vec![b[k + 1]] }, &[], format!("k{k}"))
                .unwrap();
        }
        g.push(Task::Store { output: 0, src: b[3] }, &[], "store").unwrap();
        if saved_mid {
            g.push(Task::Store { output: 1, src: b[2] }, &[], "store mid").unwrap();
        }
        g
    }

    /// One pass fuses the first pair (the third kernel's input is then taken); a second pass
    /// fuses the fused kernel with the third, through a library that wraps the first
    /// pass's. Each pass drops an intermediate, and the results are unchanged.
    #[test]
    fn passes_fuse_a_chain_pair_by_pair_and_a_second_reader_stops_it() {
        let lib = Scale { blocks: vec![TensorType::zero_bounded(&[4])] };
        let x = HostTensor::from_f32(TensorType::zero_bounded(&[4]), DType::F32, vec![1.0, -2.0, 0.5, 3.0]).unwrap();
        let g = chain(false);
        let want = interpret(&g, &lib, std::slice::from_ref(&x)).unwrap();
        let once = fuse_with(&g, &lib, &RULES).unwrap();
        assert_eq!((once.fused(), once.graph.buffers().len()), (1, 3));
        assert_eq!(interpret(&once.graph, &once.kernels, std::slice::from_ref(&x)).unwrap(), want);
        let twice = fuse_with(&once.graph, &once.kernels, &RULES).unwrap();
        assert_eq!((twice.fused(), twice.graph.buffers().len()), (1, 2));
        assert!(twice.kernels.name(4).starts_with("product (product (×2 then ×3) then ×4"));
        assert_eq!(interpret(&twice.graph, &twice.kernels, std::slice::from_ref(&x)).unwrap(), want);
        assert_eq!(want[0].to_f32(), [24.0, -48.0, 12.0, 72.0]);
        // The second result saved: only the first pair fuses, the third kernel stays.
        let g = chain(true);
        let f = fuse_with(&g, &lib, &RULES).unwrap();
        assert_eq!(f.fused(), 1);
        assert_eq!(f.graph.nodes().iter().filter(|n| matches!(n.task, Task::Kernel { .. })).count(), 2);
        assert_eq!(fuse_with(&f.graph, &f.kernels, &RULES).unwrap().fused(), 0);
    }
}
