//! The Section 5.4 rewrites the search proposes, each a value ([`Rewrite`]): a name (the
//! `origin` of a program it improved: `rewrite: {name}`), a weight (how often it is drawn),
//! and `propose`, which rewrites the current program at a place it picks with the search's
//! random stream. [`SearchOptions::rewrites`](super::SearchOptions::rewrites) is the list the
//! search draws from; [`REWRITES`] is the default.
//!
//! One concept per file: `relay.rs` (relay introduction and elimination, relay chains,
//! relay-and-combine, every slow route through its detour), `multicast.rs` (fission and
//! fusion), `aggregation.rs` (aggregation pushdown and pullup), `edit.rs` (source
//! substitution and deletion).
//!
//! A rule of another crate is a value like these. It sees the program and the machine
//! through [`RewriteSite`] and may return any program: the search validates and scores every
//! candidate itself. (The program a rule sees is the body with the preamble's `GPUS` only,
//! so the guarded rewrites of [`crate::rewrite`], which check a whole program, refuse it;
//! a rule edits the body directly.)
//!
//! ```
//! use einsum_exprog::Program;
//! use einsum_exprog::synth::{REWRITES, Rewrite, RewriteSite, Rewrites, SearchOptions, collectives, search};
//! use einsum_sim::Topology;
//!
//! /// Drops the last action of the body: a deletion always at the same place.
//! #[derive(Debug)]
//! struct DropLast;
//!
//! impl Rewrite for DropLast {
//!     fn name(&self) -> &str {
//!         "drop the last action"
//!     }
//!     fn weight(&self) -> usize {
//!         2
//!     }
//!     fn propose(&self, at: &mut RewriteSite<'_>) -> Option<Program> {
//!         let mut program = at.program().clone();
//!         let last = program.body.last()?.clone();
//!         program.body.remove(&last);
//!         Some(program)
//!     }
//! }
//!
//! // today's rules, then the new one: a list of the caller's own
//! let mut rules: Vec<&'static dyn Rewrite> = REWRITES.to_vec();
//! rules.push(&DropLast);
//! let rewrites = Rewrites(Vec::leak(rules));
//! let options = SearchOptions { iterations: 20, rewrites, ..SearchOptions::default() };
//! let found = search(&collectives::all_gather(4, 0.1), &Topology::preset("dgx-a100")?, options)?;
//! assert!(found.program.validate_with(&found.membership).is_ok());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod aggregation;
mod edit;
mod multicast;
mod relay;

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;

use einsum_core::SeededRng as Rng;

pub use aggregation::{Pullup, Pushdown};
pub use edit::{Delete, SubstituteSource};
pub use multicast::{Fission, Fusion};
pub(super) use relay::relay_slow_routes;
pub use relay::{EliminateRelay, IntroduceRelay, RelayAndCombine, RelayChain, RelaySlowRoutes};

#[cfg(test)]
pub(super) use relay::{relay_and_combine, relay_chain};

use super::budget::Budget;
use super::plan::SiteRoutes;
use crate::action::Action;
use crate::ids::SiteId;
use crate::program::Program;
use crate::target::Target;

/// One rewrite rule the search draws (see the module docs).
pub trait Rewrite: Sync + fmt::Debug {
    /// Its name in the origin of a program it led to (`rewrite: {name}`).
    fn name(&self) -> &str;
    /// How often it is drawn: a rule of weight `w` in a list of total weight `W` is drawn
    /// with probability `w / W`.
    fn weight(&self) -> usize;
    /// The program at `at` rewritten at a place this rule picks (drawing from
    /// [`RewriteSite::rng`]); `None` when it does not apply there or refuses. The result need
    /// not be valid: the search validates it.
    fn propose(&self, at: &mut RewriteSite<'_>) -> Option<Program>;
}

/// The rules the search draws from, in order ([`SearchOptions::rewrites`](super::SearchOptions::rewrites)):
/// a `'static` list, so that the options stay `Copy` (a caller's own list can be a `static`
/// or a leaked `Vec`).
#[derive(Clone, Copy)]
pub struct Rewrites(pub &'static [&'static dyn Rewrite]);

impl Default for Rewrites {
    /// [`REWRITES`].
    fn default() -> Self {
        Rewrites(REWRITES)
    }
}

impl fmt::Debug for Rewrites {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter().map(|r| (r.name(), r.weight()))).finish()
    }
}

impl PartialEq for Rewrites {
    /// The same names and weights in the same order.
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self.0.iter().zip(other.0).all(|(a, b)| a.name() == b.name() && a.weight() == b.weight())
    }
}

impl Rewrites {
    /// The rule a draw in `0..total weight` falls on: the rules laid end to end by weight, in
    /// order. `None` when the list weighs nothing.
    pub fn draw(&self, rng: &mut Rng) -> Option<&'static dyn Rewrite> {
        let total: usize = self.0.iter().map(|r| r.weight()).sum();
        if total == 0 {
            return None;
        }
        let mut left = rng.below(total);
        for &rule in self.0 {
            if left < rule.weight() {
                return Some(rule);
            }
            left -= rule.weight();
        }
        None
    }
}

/// The search's rules, in the order and with the weights it has always drawn them by
/// (total 23): relay introduction 5, relay elimination 1, fission 3, fusion 2, pushdown 2,
/// pullup 1, source substitution 3, deletion 3, relay chain 1, relay-and-combine 1, every
/// slow route through its detour 1.
pub static REWRITES: &[&dyn Rewrite] = &[
    &IntroduceRelay,
    &EliminateRelay,
    &Fission,
    &Fusion,
    &Pushdown,
    &Pullup,
    &SubstituteSource,
    &Delete,
    &RelayChain,
    &RelayAndCombine,
    &RelaySlowRoutes,
];

/// Where a rule is proposed: the current program, its body in order, every transfer of it
/// (action, source site, destination), the machine's sites and detours, and the search's
/// random stream.
pub struct RewriteSite<'a> {
    program: &'a Program,
    body: Vec<&'a Action>,
    sends: Vec<(&'a Action, SiteId, SiteId)>,
    pub(super) machine: &'a SiteRoutes,
    pub(super) rng: &'a mut Rng,
    pub(super) budget: Budget,
}

impl<'a> RewriteSite<'a> {
    /// The site of a proposal on `program`.
    pub(super) fn new(program: &'a Program, machine: &'a SiteRoutes, rng: &'a mut Rng, budget: Budget) -> Self {
        let body: Vec<&Action> = program.body.iter().collect();
        let sends: Vec<(&Action, SiteId, SiteId)> = body
            .iter()
            .filter_map(|a| a.source_site().map(|s| (*a, s)))
            .flat_map(|(a, s)| a.dests.iter().map(move |d| (a, s, *d)))
            .collect();
        RewriteSite { program, body, sends, machine, rng, budget }
    }

    /// The program to rewrite: its body, and the preamble's `GPUS` only.
    pub fn program(&self) -> &'a Program {
        self.program
    }

    /// Its body, in order.
    pub fn body(&self) -> &[&'a Action] {
        &self.body
    }

    /// Every transfer of the body sourced at a site: the action, its source, one destination.
    pub fn sends(&self) -> &[(&'a Action, SiteId, SiteId)] {
        &self.sends
    }

    /// The sites the search routes over, ascending.
    pub fn sites(&self) -> &[SiteId] {
        &self.machine.sites
    }

    /// The fastest two-hop detour from `from` to `to`, where one is faster than the direct
    /// route.
    pub fn relay(&self, from: SiteId, to: SiteId) -> Option<SiteId> {
        self.machine.relay(from, to)
    }

    /// The search's random stream: every choice a rule makes is drawn from it, so that the
    /// search stays deterministic.
    pub fn rng(&mut self) -> &mut Rng {
        self.rng
    }
}

/// For each action of `body` (a program's body in order, so sorted by aggregate first),
/// the range of the actions with its aggregate: the pairs of actions of one aggregate that
/// the rewrites look for, without comparing every pair of the body.
pub(super) fn aggregate_runs(body: &[&Action]) -> Vec<Range<usize>> {
    let mut runs = Vec::with_capacity(body.len());
    let mut start = 0;
    for i in 1..=body.len() {
        if i == body.len() || body[i].aggregate != body[start].aggregate {
            runs.extend(std::iter::repeat_n(start..i, i - start));
            start = i;
        }
    }
    runs
}

/// The positions in `body` of the actions of each source, ascending.
pub(super) fn source_index<'a>(body: &[&'a Action]) -> HashMap<&'a Target, Vec<usize>> {
    let mut of_source: HashMap<&Target, Vec<usize>> = HashMap::new();
    for (i, a) in body.iter().enumerate() {
        of_source.entry(&a.source).or_default().push(i);
    }
    of_source
}
