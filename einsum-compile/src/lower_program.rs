//! Lowering one synthesized exchange program to task-graph pieces (Section 5.1): slices of
//! the producer's partial outputs for the `IN` atoms, an aggregation and transfers per
//! firing of the closure, and a stitch per consumer function spec.

use std::collections::HashMap;

use einsum_core::taskgraph::{BufferId, DeviceId, Task, TaskGraph};
use einsum_core::{Aggregation, DType, TensorType};

use einsum_exprog::Aggregate;
use einsum_exprog::Preamble;
use einsum_exprog::SiteId;
use einsum_exprog::{Closure, Firing, Materialization, Producer};

use super::CompileError;

/// Where an exchange program's pieces come from and go to.
#[derive(Clone, Copy, Debug)]
pub struct ExchangeSources<'a> {
    /// The buffer each producer function spec (the `holder` of an `IN` copy) left its
    /// unaggregated output block in; it lives on the copy's site.
    pub holders: &'a [BufferId],
    /// The producer's ⊕.
    pub aggregation: Aggregation,
    /// The site (device) of every consumer function spec, in spec order.
    pub placement: &'a [DeviceId],
    /// A prefix for task labels (the consumer and its input).
    pub label: &'a str,
}

fn device(site: SiteId) -> DeviceId {
    DeviceId(site.0 as u32)
}

/// Lowers `program`'s `closure` (computed under a membership that puts the preamble's
/// partition `S{i+1}` on `placement[i]`) into `graph`; returns, per consumer function spec,
/// the buffer holding its whole input block.
///
/// Each `IN` copy is a `Slice` of its holder's buffer (the buffer itself when the atom is the
/// whole block), made when first read. Each firing, in closure order, aggregates its pieces
/// at its site with ⊕ when the aggregate is not there yet, then transfers it to every
/// destination where the firing materialises it first. An aggregate that combines copies of
/// more than one atom has no tensor meaning (⊕ is defined on one box) and is refused.
pub fn lower_exchange(
    graph: &mut TaskGraph,
    preamble: &Preamble,
    closure: &Closure,
    sources: &ExchangeSources<'_>,
) -> Result<Vec<BufferId>, CompileError> {
    let mats = closure.materializations();
    let mut lowering = GraphLowering {
        graph,
        preamble,
        sources,
        dtype: preamble.dtype,
        mats,
        index: closure.by_aggregate(),
        bufs: vec![None; mats.len()],
    };
    for (f, firing) in closure.firings().iter().enumerate() {
        lowering.fire(f, firing)?;
    }
    let mut blocks = Vec::with_capacity(preamble.consumers.len());
    for i in 0..preamble.consumers.len() {
        blocks.push(lowering.consumer_block(i)?);
    }
    Ok(blocks)
}

/// One exchange program being lowered into the task graph (`einsum_exprog::Lowering` is its
/// closure lowered to the simulator's task DAG): the graph, and the buffer of every
/// materialisation of its closure formed so far.
struct GraphLowering<'a, 'g> {
    graph: &'g mut TaskGraph,
    preamble: &'a Preamble,
    sources: &'a ExchangeSources<'a>,
    dtype: DType,
    mats: &'a [Materialization],
    index: &'a HashMap<SiteId, HashMap<Aggregate, usize>>,
    bufs: Vec<Option<BufferId>>,
}

impl GraphLowering<'_, '_> {
    /// A [`CompileError::Lowering`] of this exchange.
    fn internal(&self, reason: String) -> CompileError {
        CompileError::Lowering { label: self.sources.label.to_string(), reason }
    }

    /// The materialisation of `agg` at `site`, if the closure has one.
    fn index_of(&self, agg: &Aggregate, site: SiteId) -> Option<usize> {
        self.index.get(&site).and_then(|at| at.get(agg)).copied()
    }

    /// The preamble atom every ExProg atom of an aggregate is a copy of, if it is just one.
    fn atom_of(&self, agg: &Aggregate) -> Result<usize, CompileError> {
        let mut atoms = agg.atoms().iter().map(|a| self.preamble.copy(a).map(|c| c.atom));
        let first = atoms.next().flatten();
        match first {
            Some(a) if atoms.all(|b| b == Some(a)) => Ok(a),
            _ => {
                Err(CompileError::MixedAggregate { label: self.sources.label.to_string(), aggregate: agg.to_string() })
            }
        }
    }

    /// The buffer of materialisation `m`, slicing an `IN` copy from its holder on first use.
    fn resident(&mut self, m: usize) -> Result<BufferId, CompileError> {
        if let Some(b) = self.bufs[m] {
            return Ok(b);
        }
        let (preamble, label) = (self.preamble, self.sources.label);
        let mat = &self.mats[m];
        let Producer::Input(id) = &mat.producer else {
            return Err(self.internal(format!("{} @ {} is read before it is formed", mat.aggregate, mat.site)));
        };
        let copy = preamble.copy(id).ok_or_else(|| self.internal(format!("atom {id} is not in the preamble")))?;
        let holder = *self
            .sources
            .holders
            .get(copy.holder)
            .ok_or_else(|| self.internal(format!("atom {id} is held by unknown function spec {}", copy.holder)))?;
        if holder.0 as usize >= self.graph.buffers().len() {
            return Err(self.internal(format!("the holder of atom {id} is buffer {}, not in the graph", holder.0)));
        }
        // A widened atom's copy is its cell with the statistics column.
        let block = &preamble
            .atoms
            .get(copy.atom)
            .ok_or_else(|| self.internal(format!("atom {id} has no cell")))?
            .buffer_type();
        let b = if self.graph.buffer(holder).ty == *block {
            holder
        } else {
            let dst = self.graph.add_buffer(device(copy.site), block.clone(), self.dtype);
            self.graph.push(Task::Slice { src: holder, dst }, &[], format!("{label}: slice {id}"))?;
            dst
        };
        self.bufs[m] = Some(b);
        Ok(b)
    }

    /// Firing `f` of the closure: its aggregate formed at its site (where it is not there
    /// yet), then sent to every destination it materialises first.
    fn fire(&mut self, f: usize, firing: &Firing) -> Result<(), CompileError> {
        let agg = &firing.action.aggregate;
        let atom = self.atom_of(agg)?;
        let block = self
            .preamble
            .atoms
            .get(atom)
            .ok_or_else(|| self.internal(format!("atom {atom} has no cell")))?
            .buffer_type();
        let pieces = firing.pieces.iter().map(|&m| self.resident(m)).collect::<Result<Vec<BufferId>, _>>()?;
        let present = firing.pieces.len() == 1 && &self.mats[firing.pieces[0]].aggregate == agg;
        let here = if present { pieces[0] } else { self.aggregate(firing, pieces, &block)? };
        self.transfer(f, firing, here, &block)
    }

    /// The aggregate of `firing` formed from its `pieces` with ⊕ at its site, recorded as
    /// the materialisation there where it is the first.
    fn aggregate(
        &mut self,
        firing: &Firing,
        pieces: Vec<BufferId>,
        block: &TensorType,
    ) -> Result<BufferId, CompileError> {
        let agg = &firing.action.aggregate;
        let label = self.sources.label;
        if pieces.len() < 2 {
            return Err(self.internal(format!("{agg} @ {} is formed from one piece", firing.site)));
        }
        let dst = self.graph.add_buffer(device(firing.site), block.clone(), self.dtype);
        self.graph.push(
            Task::Aggregate { srcs: pieces, dst, agg: self.sources.aggregation },
            &[],
            format!("{label}: {agg} @ {}", firing.site),
        )?;
        if let Some(m) = self.index_of(agg, firing.site)
            && self.bufs[m].is_none()
        {
            self.bufs[m] = Some(dst);
        }
        Ok(dst)
    }

    /// The transfers of firing `f`'s aggregate, at `here`, to each destination where this
    /// firing is the one that materialises it.
    fn transfer(&mut self, f: usize, firing: &Firing, here: BufferId, block: &TensorType) -> Result<(), CompileError> {
        let agg = &firing.action.aggregate;
        let label = self.sources.label;
        for &d in &firing.action.dests {
            let Some(m) = self.index_of(agg, d) else { continue };
            if matches!(self.mats[m].producer, Producer::Firing(k) if k == f) && self.bufs[m].is_none() {
                let dst = self.graph.add_buffer(device(d), block.clone(), self.dtype);
                self.graph.push(
                    Task::Transfer { src: here, dst },
                    &[],
                    format!("{label}: {agg} @ {} -> {d}", firing.site),
                )?;
                self.bufs[m] = Some(dst);
            }
        }
        Ok(())
    }

    /// The buffer holding consumer function spec `i`'s whole input block on its device:
    /// its atoms' buffers stitched (a block of one atom is that atom's buffer), each sliced
    /// to the block first where it reaches outside it (a row-wise ⊕'s whole rows, with their
    /// statistics column).
    fn consumer_block(&mut self, i: usize) -> Result<BufferId, CompileError> {
        let (preamble, label) = (self.preamble, self.sources.label);
        let consumer = &preamble.consumers[i];
        let dev =
            *self.sources.placement.get(i).ok_or_else(|| self.internal(format!("no device for function spec {i}")))?;
        let site = SiteId(dev.0 as usize);
        let mut parts = Vec::with_capacity(consumer.atoms.len());
        for &a in &consumer.atoms {
            let agg = preamble.aggregate(a).ok_or_else(|| self.internal(format!("atom {a} has no copy")))?;
            let m = self
                .index_of(&agg, site)
                .ok_or_else(|| self.internal(format!("{agg} never reaches site {site}: the program is not valid")))?;
            let b = self.resident(m)?;
            let cell = &preamble.atoms[a].block;
            let part = cell
                .intersect(&consumer.block)
                .ok_or_else(|| self.internal(format!("atom {a} {cell} misses the block {}", consumer.block)))?;
            if self.graph.buffer(b).ty == part {
                parts.push(b);
            } else {
                let dst = self.graph.add_buffer(dev, part, self.dtype);
                self.graph.push(
                    Task::Slice { src: b, dst },
                    &[],
                    format!("{label}: slice atom {} for function spec {i}", a + 1),
                )?;
                parts.push(dst);
            }
        }
        Ok(match parts.as_slice() {
            [one] if self.graph.buffer(*one).ty == consumer.block => *one,
            _ => {
                let dst = self.graph.add_buffer(dev, consumer.block.clone(), self.dtype);
                self.graph.push(
                    Task::Stitch { srcs: parts, dst },
                    &[],
                    format!("{label}: stitch for function spec {i}"),
                )?;
                dst
            }
        })
    }
}
