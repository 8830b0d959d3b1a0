//! Lowering one synthesized exchange program to task-graph pieces (Section 5.1): slices of
//! the producer's partial outputs for the `IN` atoms, an aggregation and transfers per
//! firing of the closure, and a stitch per consumer function spec.

use einsum_core::taskgraph::{BufferId, DeviceId, Task, TaskGraph};
use einsum_core::{Aggregation, DType};

use einsum_exprog::Aggregate;
use einsum_exprog::Preamble;
use einsum_exprog::SiteId;
use einsum_exprog::{Closure, Producer};

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
    let dtype: DType = preamble.dtype;
    let mats = closure.materializations();
    let index = closure.by_aggregate();
    let index_of = |agg: &Aggregate, site: SiteId| index.get(&site).and_then(|at| at.get(agg)).copied();
    let mut bufs: Vec<Option<BufferId>> = vec![None; mats.len()];
    let label = sources.label;
    let internal = |reason: String| CompileError::Lowering { label: label.to_string(), reason };

    // The preamble atom every ExProg atom of an aggregate is a copy of, if it is just one.
    let atom_of = |agg: &Aggregate| -> Result<usize, CompileError> {
        let mut atoms = agg.atoms().iter().map(|a| preamble.copy(a).map(|c| c.atom));
        let first = atoms.next().flatten();
        match first {
            Some(a) if atoms.all(|b| b == Some(a)) => Ok(a),
            _ => Err(CompileError::MixedAggregate { label: label.to_string(), aggregate: agg.to_string() }),
        }
    };

    // The buffer of materialisation `m`, slicing an `IN` copy from its holder on first use.
    let resident = |graph: &mut TaskGraph, bufs: &mut Vec<Option<BufferId>>, m: usize| {
        if let Some(b) = bufs[m] {
            return Ok(b);
        }
        let mat = &mats[m];
        let Producer::Input(id) = &mat.producer else {
            return Err(internal(format!("{} @ {} is read before it is formed", mat.aggregate, mat.site)));
        };
        let copy = preamble.copy(id).ok_or_else(|| internal(format!("atom {id} is not in the preamble")))?;
        let holder = *sources
            .holders
            .get(copy.holder)
            .ok_or_else(|| internal(format!("atom {id} is held by unknown function spec {}", copy.holder)))?;
        if holder.0 as usize >= graph.buffers().len() {
            return Err(internal(format!("the holder of atom {id} is buffer {}, not in the graph", holder.0)));
        }
        let block = &preamble.atoms.get(copy.atom).ok_or_else(|| internal(format!("atom {id} has no cell")))?.block;
        let b = if graph.buffer(holder).ty == *block {
            holder
        } else {
            let dst = graph.add_buffer(device(copy.site), block.clone(), dtype);
            graph.push(Task::Slice { src: holder, dst }, &[], format!("{label}: slice {id}"))?;
            dst
        };
        bufs[m] = Some(b);
        Ok(b)
    };

    for (f, firing) in closure.firings().iter().enumerate() {
        let agg = &firing.action.aggregate;
        let atom = atom_of(agg)?;
        let block = preamble.atoms.get(atom).ok_or_else(|| internal(format!("atom {atom} has no cell")))?.block.clone();
        let pieces =
            firing.pieces.iter().map(|&m| resident(graph, &mut bufs, m)).collect::<Result<Vec<BufferId>, _>>()?;
        let present = firing.pieces.len() == 1 && &mats[firing.pieces[0]].aggregate == agg;
        let here = if present {
            pieces[0]
        } else {
            if pieces.len() < 2 {
                return Err(internal(format!("{agg} @ {} is formed from one piece", firing.site)));
            }
            let dst = graph.add_buffer(device(firing.site), block.clone(), dtype);
            graph.push(
                Task::Aggregate { srcs: pieces, dst, agg: sources.aggregation },
                &[],
                format!("{label}: {agg} @ {}", firing.site),
            )?;
            if let Some(m) = index_of(agg, firing.site)
                && bufs[m].is_none()
            {
                bufs[m] = Some(dst);
            }
            dst
        };
        for &d in &firing.action.dests {
            let Some(m) = index_of(agg, d) else { continue };
            if matches!(mats[m].producer, Producer::Firing(k) if k == f) && bufs[m].is_none() {
                let dst = graph.add_buffer(device(d), block.clone(), dtype);
                graph.push(
                    Task::Transfer { src: here, dst },
                    &[],
                    format!("{label}: {agg} @ {} -> {d}", firing.site),
                )?;
                bufs[m] = Some(dst);
            }
        }
    }

    let mut blocks = Vec::with_capacity(preamble.consumers.len());
    for (i, consumer) in preamble.consumers.iter().enumerate() {
        let dev = *sources.placement.get(i).ok_or_else(|| internal(format!("no device for function spec {i}")))?;
        let site = SiteId(dev.0 as usize);
        let mut parts = Vec::with_capacity(consumer.atoms.len());
        for &a in &consumer.atoms {
            let agg = preamble.aggregate(a).ok_or_else(|| internal(format!("atom {a} has no copy")))?;
            let m = index_of(&agg, site)
                .ok_or_else(|| internal(format!("{agg} never reaches site {site}: the program is not valid")))?;
            parts.push(resident(graph, &mut bufs, m)?);
        }
        let whole = match parts.as_slice() {
            [one] if graph.buffer(*one).ty == consumer.block => *one,
            _ => {
                let dst = graph.add_buffer(dev, consumer.block.clone(), dtype);
                graph.push(Task::Stitch { srcs: parts, dst }, &[], format!("{label}: stitch for function spec {i}"))?;
                dst
            }
        };
        blocks.push(whole);
    }
    Ok(blocks)
}
