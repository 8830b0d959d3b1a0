//! Synthesizing one input's exchange program and reading the consumer's placement from it.

use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::Arc;

use einsum_core::taskgraph::DeviceId;
use einsum_core::{Aggregation, DType};
use einsum_joinagg::JoinAggSpec;
use einsum_sim::Topology;

use einsum_exprog::Closure;
use einsum_exprog::Membership;
use einsum_exprog::PartitionSpec;
use einsum_exprog::Program;
use einsum_exprog::SiteId;
use einsum_exprog::{Preamble, Upstream, preamble_with};

use super::{CompileError, ExchangeSynthesizer, Synthesized};
use crate::reuse::{Reused, SynthesisCache};

/// An exchange program chosen for one consumer input, with what lowering needs.
pub(crate) struct Placed {
    pub preamble: Preamble,
    pub program: Arc<Program>,
    pub closure: Rc<Closure>,
    /// The site of every consumer function spec (from the membership of `S1..Sp`).
    pub placement: Vec<DeviceId>,
    pub simulated_ms: f64,
}

/// What to synthesize: the producer's side, the consumer's, and whether the consumer's
/// placement is already fixed.
pub(crate) struct Request<'a> {
    pub producer: &'a JoinAggSpec,
    pub output: usize,
    pub producer_placement: &'a [DeviceId],
    /// The producer's ⊕ (a row-wise one keeps the rows of its shared blocks whole).
    pub aggregation: Aggregation,
    pub consumer: &'a JoinAggSpec,
    pub input: usize,
    pub dtype: DType,
    pub devices: usize,
    /// `Some(placement)`: the partitions `S1..Sp` are declared with these members.
    pub fixed: Option<&'a [DeviceId]>,
    /// For error messages: the consumer and its input.
    pub label: String,
}

/// Builds the preamble, synthesizes a body with `synthesizer` (or takes it from `cache`, see
/// [`crate::reuse`]), validates it under the membership it was costed with, and reads the
/// consumer's placement from that membership. A request equal to an earlier one of the same
/// compile (the same producer and consumer specs, placements and dtype: a layer of a stack
/// repeating the exchange of the layer before it) gets the earlier answer, shared, without
/// building its preamble again: everything here is a function of the request, the
/// synthesizer and the topology.
pub(crate) fn synthesize(
    req: &Request<'_>,
    synthesizer: &dyn ExchangeSynthesizer,
    topology: &Topology,
    cache: &mut SynthesisCache,
) -> Result<Rc<Placed>, CompileError> {
    let key = RequestKey {
        producer: req.producer.clone(),
        output: req.output,
        producer_placement: req.producer_placement.to_vec(),
        aggregation: req.aggregation,
        consumer: req.consumer.clone(),
        input: req.input,
        dtype: req.dtype,
        fixed: req.fixed.map(<[DeviceId]>::to_vec),
    };
    if let Some(done) = cache.request(&key) {
        return Ok(done);
    }
    let done = Rc::new(synthesize_afresh(req, synthesizer, topology, cache)?);
    cache.remember_request(key, Rc::clone(&done));
    Ok(done)
}

/// Everything a [`Request`] is answered from except its label (which only names it in
/// errors): the key of [`SynthesisCache::request`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RequestKey {
    producer: JoinAggSpec,
    output: usize,
    producer_placement: Vec<DeviceId>,
    aggregation: Aggregation,
    consumer: JoinAggSpec,
    input: usize,
    dtype: DType,
    fixed: Option<Vec<DeviceId>>,
}

/// [`synthesize`] for a request not seen before in this compile.
fn synthesize_afresh(
    req: &Request<'_>,
    synthesizer: &dyn ExchangeSynthesizer,
    topology: &Topology,
    cache: &mut SynthesisCache,
) -> Result<Placed, CompileError> {
    let label = || req.label.clone();
    let devices: Vec<SiteId> = (0..req.devices).map(SiteId).collect();
    let sites: Vec<SiteId> = req.producer_placement.iter().map(|d| SiteId(d.0 as usize)).collect();
    let upstream = Upstream::Spec { spec: req.producer, output: req.output, placement: &sites };
    let mut pre = preamble_with(&upstream, req.consumer, req.input, req.dtype, &devices, req.aggregation)
        .map_err(|source| CompileError::Preamble { label: label(), source })?;
    if let Some(fixed) = req.fixed {
        for (c, d) in pre.consumers.iter().zip(fixed) {
            pre.program
                .partitions
                .insert(c.partition.clone(), PartitionSpec::Members(BTreeSet::from([SiteId(d.0 as usize)])));
        }
    }
    let synth_err = |source| CompileError::Synth { label: label(), source };
    let (key, canonical) = SynthesisCache::key(&pre.program);
    let across_renamings = synthesizer.invariant_under_renaming();
    let reused = match cache.get(&key, &canonical, topology, across_renamings) {
        Some(hit) => hit,
        None => {
            let Synthesized { program, membership, simulated_ms, closure } =
                synthesizer.synthesize(&pre, topology).map_err(synth_err)?;
            let (membership, closure) = match closure {
                Some(closure) => (membership, closure),
                None => {
                    let validation = program
                        .validate_with(&membership)
                        .map_err(|source| CompileError::Invalid { label: label(), source })?;
                    (validation.membership, validation.closure)
                }
            };
            let fresh = Reused { program, membership, closure: Some(Rc::new(closure)), simulated_ms };
            cache.insert(key, canonical, fresh.clone());
            fresh
        }
    };
    let Reused { program, membership, closure, simulated_ms } = reused;
    let closure = match closure {
        Some(c) => c,
        None => Rc::new(
            program
                .validate_with(&membership)
                .map_err(|source| CompileError::Invalid { label: label(), source })?
                .closure,
        ),
    };
    // A searched program may cut the atoms into chunks: lower it against the preamble cut alike.
    let pre =
        pre.refined_for(&program).map_err(|e| CompileError::Lowering { label: label(), reason: e.to_string() })?;
    let placement =
        read_placement(&pre, &membership).map_err(|reason| CompileError::Placement { label: label(), reason })?;
    Ok(Placed { preamble: pre, program: Arc::new(program), closure, placement, simulated_ms })
}

/// The device of each consumer function spec: the one member of its partition; the sites
/// must be distinct (a bijection from function specs to devices).
fn read_placement(pre: &Preamble, membership: &Membership) -> Result<Vec<DeviceId>, String> {
    let mut seen = BTreeSet::new();
    let mut placement = Vec::with_capacity(pre.consumers.len());
    for c in &pre.consumers {
        let sites = membership.sites(&c.partition).ok_or_else(|| format!("partition {} has no sites", c.partition))?;
        let [site] = sites.iter().copied().collect::<Vec<_>>()[..] else {
            return Err(format!("partition {} has {} sites, not one", c.partition, sites.len()));
        };
        if !seen.insert(site) {
            return Err(format!("site {site} holds two function specs"));
        }
        placement.push(DeviceId(site.0 as u32));
    }
    Ok(placement)
}
