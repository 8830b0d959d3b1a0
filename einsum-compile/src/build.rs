//! The task graph of one compile, built operator by operator in topological order (the
//! algorithm is in the crate docs): each operator's exchange programs and kernels, then the
//! saved outputs.

use std::collections::HashMap;
use std::sync::Arc;

use einsum_core::taskgraph::{BufferId, DeviceId, Task, TaskGraph};
use einsum_core::{Aggregation, TensorType};
use einsum_joinagg::{AbstractOperator, Computation, JoinAggSpec, Node, OpId, TensorId};
use einsum_sim::Topology;

use crate::placement::{Request, synthesize};
use crate::{CompileError, ExchangeProgram, ExchangeSources, ExchangeSynthesizer, KernelCall, lower_exchange, reuse};

/// An operator output already compiled: its partial blocks, one per function spec.
struct Produced<'a> {
    spec: &'a JoinAggSpec,
    output: usize,
    placement: Vec<DeviceId>,
    buffers: Vec<BufferId>,
    aggregation: Aggregation,
}

/// The graph of a compile being built, with the kernels, exchange programs and placements
/// that go with it.
pub(crate) struct Builder<'a> {
    comp: &'a Computation,
    specs: &'a HashMap<OpId, JoinAggSpec>,
    p: usize,
    topology: &'a Topology,
    synthesizer: &'a dyn ExchangeSynthesizer,
    /// The computation's inputs, in the graph's input order.
    inputs: Vec<TensorId>,
    pub graph: TaskGraph,
    pub kernels: Vec<KernelCall>,
    pub programs: Vec<ExchangeProgram>,
    pub placements: HashMap<OpId, Vec<DeviceId>>,
    produced: HashMap<TensorId, Produced<'a>>,
    /// The resident buffer of every (input, device, block) loaded so far.
    loaded: HashMap<(usize, DeviceId, TensorType), BufferId>,
}

/// The name of operator `id` in errors and labels.
pub(crate) fn op_name(comp: &Computation, id: OpId) -> String {
    comp.node(id).map_or_else(|| format!("vertex {}", id.0), |n| n.name().to_string())
}

impl<'a> Builder<'a> {
    /// An empty graph over `graph`'s devices and boundaries.
    pub fn new(
        comp: &'a Computation,
        specs: &'a HashMap<OpId, JoinAggSpec>,
        topology: &'a Topology,
        synthesizer: &'a dyn ExchangeSynthesizer,
        graph: TaskGraph,
    ) -> Self {
        Builder {
            comp,
            specs,
            p: graph.devices(),
            topology,
            synthesizer,
            inputs: comp.inputs(),
            graph,
            kernels: Vec::new(),
            programs: Vec::new(),
            placements: HashMap::new(),
            produced: HashMap::new(),
            loaded: HashMap::new(),
        }
    }

    /// The resident buffer of computation input `input`'s `block` on `dev`, loaded once.
    fn load(
        &mut self,
        input: usize,
        dev: DeviceId,
        block: &TensorType,
        label: String,
    ) -> Result<BufferId, CompileError> {
        if let Some(&b) = self.loaded.get(&(input, dev, block.clone())) {
            return Ok(b);
        }
        let dst = self.graph.add_buffer(dev, block.clone(), self.graph.inputs()[input].dtype);
        self.graph.push(Task::Load { input, dst }, &[], label)?;
        self.loaded.insert((input, dev, block.clone()), dst);
        Ok(dst)
    }

    /// The position of `t` among the computation's inputs.
    fn input_index(&self, t: &TensorId) -> Result<usize, CompileError> {
        Ok(self
            .inputs
            .iter()
            .position(|x| x == t)
            .ok_or_else(|| einsum_joinagg::Error::UnknownTensor(t.to_string()))?)
    }

    /// Compiles operator `id`: its exchange programs, placement and kernels.
    pub fn operator(
        &mut self,
        id: OpId,
        op: &'a dyn AbstractOperator,
        args: &[TensorId],
        cache: &mut reuse::SynthesisCache,
    ) -> Result<(), CompileError> {
        let spec = &self.specs[&id];
        let (placement, blocks) = self.exchanges(id, spec, args, cache)?;
        tracing::debug!(
            op = %op_name(self.comp, id),
            devices = %placement.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(" "),
            "placed operator"
        );
        let outs = self.kernels_of(id, op, spec, args, &placement, &blocks)?;
        for (j, buffers) in outs.into_iter().enumerate() {
            self.produced.insert(
                TensorId { op: id, output: j },
                Produced { spec, output: j, placement: placement.clone(), buffers, aggregation: op.aggregation() },
            );
        }
        self.placements.insert(id, placement);
        Ok(())
    }

    /// The exchange programs of operator `id`'s produced inputs, lowered: the first chooses
    /// the placement (the identity without one). Returns the placement and each input's
    /// blocks (`None`: a computation input, loaded by the kernels).
    #[allow(clippy::type_complexity)]
    fn exchanges(
        &mut self,
        id: OpId,
        spec: &JoinAggSpec,
        args: &[TensorId],
        cache: &mut reuse::SynthesisCache,
    ) -> Result<(Vec<DeviceId>, Vec<Option<Vec<BufferId>>>), CompileError> {
        let comp = self.comp;
        let name = op_name(comp, id);
        let is_input = |t: &TensorId| matches!(comp.node(t.op), Some(Node::Input { .. }));
        let mut placement: Option<Vec<DeviceId>> = None;
        let mut blocks: Vec<Option<Vec<BufferId>>> = vec![None; args.len()];
        for (k, t) in args.iter().enumerate() {
            if is_input(t) {
                continue;
            }
            let from = self.produced.get(t).ok_or_else(|| einsum_joinagg::Error::UnknownTensor(t.to_string()))?;
            let label = format!("operator `{name}` input {k}");
            let req = Request {
                producer: from.spec,
                output: from.output,
                producer_placement: &from.placement,
                aggregation: from.aggregation,
                consumer: spec,
                input: k,
                dtype: comp.desc(*t)?.dtype,
                devices: self.p,
                fixed: placement.as_deref(),
                label: label.clone(),
            };
            let s = synthesize(&req, self.synthesizer, self.topology, cache)?;
            let here = placement.get_or_insert_with(|| s.placement.clone()).clone();
            let sources = ExchangeSources {
                holders: &from.buffers,
                aggregation: from.aggregation,
                placement: &here,
                label: &label,
            };
            blocks[k] = Some(lower_exchange(&mut self.graph, &s.preamble, &s.closure, &sources)?);
            tracing::debug!(op = %name, input = k, simulated_ms = s.simulated_ms, "exchange program");
            self.programs.push(ExchangeProgram {
                op: id,
                input: k,
                program: Arc::clone(&s.program),
                simulated_ms: s.simulated_ms,
            });
        }
        let placement = placement.unwrap_or_else(|| (0..self.p as u32).map(DeviceId).collect());
        Ok((placement, blocks))
    }

    /// One kernel per function spec of operator `id` on its device, reading `blocks` (or
    /// loading the computation inputs); returns the buffers written, per output. A buffer
    /// has the type of the function spec's partial ([`einsum_joinagg::partial_types`]):
    /// its output box, one column wider under a row-wise ⊕ where the box is shared.
    fn kernels_of(
        &mut self,
        id: OpId,
        op: &dyn AbstractOperator,
        spec: &JoinAggSpec,
        args: &[TensorId],
        placement: &[DeviceId],
        blocks: &[Option<Vec<BufferId>>],
    ) -> Result<Vec<Vec<BufferId>>, CompileError> {
        let name = op_name(self.comp, id);
        let out_descs = op.outputs();
        let mut outs: Vec<Vec<BufferId>> = vec![Vec::with_capacity(self.p); out_descs.len()];
        let partials = einsum_joinagg::partial_types(op, spec);
        for (i, f) in spec.functions.iter().enumerate() {
            let dev = placement[i];
            let mut ins = Vec::with_capacity(args.len());
            for (k, t) in args.iter().enumerate() {
                match &blocks[k] {
                    Some(b) => ins.push(b[i]),
                    None => {
                        let input = self.input_index(t)?;
                        let label = format!("load {} {} on {dev}", op_name(self.comp, t.op), f.inputs[k]);
                        ins.push(self.load(input, dev, &f.inputs[k], label)?);
                    }
                }
            }
            let written: Vec<BufferId> = partials[i]
                .iter()
                .zip(out_descs)
                .map(|(b, d)| self.graph.add_buffer(dev, b.clone(), d.dtype))
                .collect();
            let kernel = self.kernels.len();
            self.kernels.push(KernelCall { op: id, function: f.clone() });
            self.graph.push(
                Task::Kernel { kernel, inputs: ins, outputs: written.clone() },
                &[],
                format!("`{name}` f{i}"),
            )?;
            for (j, b) in written.into_iter().enumerate() {
                outs[j].push(b);
            }
        }
        Ok(outs)
    }

    /// Stores every saved tensor: a saved computation input loaded whole on device 0, an
    /// operator output's copies of each distinct box gathered at the device of the first,
    /// aggregated and stored (a row-wise ⊕'s statistics column sliced off first).
    pub fn store_saved(&mut self) -> Result<(), CompileError> {
        let comp = self.comp;
        for (o, t) in comp.saved().iter().enumerate() {
            if self.produced.contains_key(t) {
                self.store_produced(o, t)?;
                continue;
            }
            let input = self.input_index(t)?;
            let whole = self.graph.inputs()[input].ty.clone();
            let name = op_name(comp, t.op);
            let dst = self.load(input, DeviceId(0), &whole, format!("load saved input {name}"))?;
            self.graph.push(Task::Store { output: o, src: dst }, &[], format!("store {name}"))?;
        }
        Ok(())
    }

    /// Stores saved output `o`, the operator output `t`.
    fn store_produced(&mut self, o: usize, t: &TensorId) -> Result<(), CompileError> {
        let from = &self.produced[t];
        let graph = &mut self.graph;
        let mut boxes: Vec<(TensorType, Vec<usize>)> = Vec::new();
        for (i, f) in from.spec.functions.iter().enumerate() {
            let b = &f.outputs[from.output];
            match boxes.iter_mut().find(|(x, _)| x == b) {
                Some((_, holders)) => holders.push(i),
                None => boxes.push((b.clone(), vec![i])),
            }
        }
        for (block, holders) in boxes {
            let dev = from.placement[holders[0]];
            let mut pieces = vec![from.buffers[holders[0]]];
            // The partials' type (the box, or the box with a statistics column).
            let partial = graph.buffer(pieces[0]).ty.clone();
            for &h in &holders[1..] {
                let src = from.buffers[h];
                let dst = graph.add_buffer(dev, partial.clone(), graph.buffer(src).dtype);
                graph.push(Task::Transfer { src, dst }, &[], format!("gather {t} {block} f{h} -> {dev}"))?;
                pieces.push(dst);
            }
            let dtype = graph.buffer(pieces[0]).dtype;
            let mut src = if pieces.len() == 1 {
                pieces[0]
            } else {
                let dst = graph.add_buffer(dev, partial.clone(), dtype);
                graph.push(
                    Task::Aggregate { srcs: pieces, dst, agg: from.aggregation },
                    &[],
                    format!("aggregate {t} {block}"),
                )?;
                dst
            };
            if partial != block {
                let dst = graph.add_buffer(dev, block.clone(), dtype);
                graph.push(Task::Slice { src, dst }, &[], format!("drop the statistics of {t} {block}"))?;
                src = dst;
            }
            graph.push(Task::Store { output: o, src }, &[], format!("store {t} {block}"))?;
        }
        Ok(())
    }
}
