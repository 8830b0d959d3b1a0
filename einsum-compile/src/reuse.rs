//! Exchange programs synthesized once per problem, up to a renaming of sites.
//!
//! The layers of a stack repeat the same exchanges: the same producer spec feeding the same
//! consumer spec, often on the same devices, often on devices renamed. [`compile`] asks this
//! cache before synthesizing, the way `einsum_logical::Problem::new` shares the candidate
//! lists of equal operators. The key is the exchange problem in canonical form
//! ([`Relabelling::canonical`]: the preamble's `GPUS`, partitions, `IN` with sizes, and
//! `OUT`, its sites renamed in order of first appearance), so two problems that differ only
//! in which sites play which part share an entry.
//!
//! # When an entry is reused
//! Let `π` be the renaming from the sites of the problem that filled the entry to the sites
//! of the one asking (the first's canonical renaming followed by the inverse of the second's).
//! - `π` is the identity: the problem is the same, and synthesis is deterministic (a seeded
//!   search with an iteration budget, or the naive program), so the stored program, its
//!   membership and its closure are exactly what synthesizing again would give.
//! - otherwise, only with a synthesizer that says its results survive a renaming
//!   ([`crate::ExchangeSynthesizer::invariant_under_renaming`]: the searched one), and only when the topology looks the same
//!   after `π` ([`Relabelling::preserves`]: identical sites, and a capacity-preserving map of
//!   resources that takes every route among the first problem's sites to the route among
//!   the renamed ones): the stored program renamed by `π` is valid for the asking problem
//!   (validity is invariant under renaming) and simulates to the same time (the simulator sees
//!   only routes, capacities and sharing). It may differ from what a fresh search would have
//!   returned, as a search started from other labels breaks ties differently; its time does
//!   not differ (up to the rounding of the simulation's summation order). The naive synthesizer
//!   does not reuse across renamings: its placement is defined by site order (the identity
//!   placement), which a renaming does not keep.
//!
//! # Requests repeated exactly
//! Before any of this, [`SynthesisCache::request`] answers a request equal to an earlier one
//! in everything synthesis reads (producer and consumer specs, output and input, placements,
//! dtype: [`crate::placement::RequestKey`]) with the earlier answer itself, shared: the
//! preamble, closure, placement and program are a function of the request, the synthesizer and
//! the topology, so nothing is built again, not even the canonical key.
//!
//! [`compile`]: crate::compile

use std::collections::HashMap;
use std::rc::Rc;

use einsum_exprog::{Closure, Membership, Program, Relabelling};
use einsum_sim::Topology;

use crate::placement::{Placed, RequestKey};

/// A synthesized exchange program as the cache keeps and returns it.
#[derive(Clone, Debug)]
pub(crate) struct Reused {
    /// The preamble with the synthesized body, in the asking problem's sites.
    pub program: Program,
    /// The membership it is valid under.
    pub membership: Membership,
    /// Its closure under that membership, when reused unchanged (`None`: renamed, so the
    /// caller computes it while validating). Shared, not copied, by every exchange that
    /// reuses it: a closure holds a set of atoms per step, and cloning it on every hit
    /// cost more than the lookup.
    pub closure: Option<Rc<Closure>>,
    /// Its simulated completion time, ms.
    pub simulated_ms: f64,
}

/// One synthesized problem: the canonical renaming of the problem that filled it, and its
/// result in that problem's own sites.
struct Entry {
    canonical: Relabelling,
    result: Reused,
}

/// The cache of one compilation (see the module docs).
#[derive(Default)]
pub(crate) struct SynthesisCache {
    /// Per key, every problem synthesized under it whose result no earlier entry could
    /// stand in for.
    entries: HashMap<String, Vec<Entry>>,
    /// Every request answered so far, by everything it is answered from
    /// ([`crate::placement::synthesize`]): a request repeated exactly skips even the
    /// preamble and the canonical key.
    requests: HashMap<RequestKey, Rc<Placed>>,
    /// Lookups answered from an entry (unchanged or renamed).
    pub hits: usize,
    /// Of those, answered through a renaming other than the identity.
    pub renamed: usize,
}

impl SynthesisCache {
    /// The key and canonical renaming of a preamble (a program with an empty body).
    pub fn key(preamble: &Program) -> (String, Relabelling) {
        let canonical = Relabelling::canonical(preamble);
        (canonical.program(preamble).to_string(), canonical)
    }

    /// A program for the problem with this key and canonical renaming, if one was
    /// synthesized and may be reused here (module docs); `across_renamings`: whether a
    /// renamed program may stand in for a fresh synthesis.
    pub fn get(
        &mut self,
        key: &str,
        canonical: &Relabelling,
        topology: &Topology,
        across_renamings: bool,
    ) -> Option<Reused> {
        let entries = self.entries.get(key)?;
        if let Some(same) = entries.iter().find(|e| e.canonical == *canonical) {
            self.hits += 1;
            return Some(same.result.clone());
        }
        if !across_renamings {
            return None;
        }
        let (entry, pi) = entries
            .iter()
            .map(|e| (e, e.canonical.then(&canonical.inverse())))
            .find(|(_, pi)| pi.preserves(topology))?;
        self.hits += 1;
        self.renamed += 1;
        let r = &entry.result;
        Some(Reused {
            program: pi.program(&r.program),
            membership: pi.membership(&r.membership),
            closure: None,
            simulated_ms: r.simulated_ms,
        })
    }

    /// The answer to a request equal to `key` made earlier in this compile, counted as a
    /// hit.
    pub fn request(&mut self, key: &RequestKey) -> Option<Rc<Placed>> {
        let done = self.requests.get(key)?;
        self.hits += 1;
        Some(Rc::clone(done))
    }

    /// Remembers the answer to a request.
    pub fn remember_request(&mut self, key: RequestKey, done: Rc<Placed>) {
        self.requests.insert(key, done);
    }

    /// Remembers the result of synthesizing the problem with this key and canonical
    /// renaming.
    pub fn insert(&mut self, key: String, canonical: Relabelling, result: Reused) {
        self.entries.entry(key).or_default().push(Entry { canonical, result });
    }
}
