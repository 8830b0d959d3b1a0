//! The relay rules: relay introduction (aimed at slow routes) and elimination, a relay chain
//! through two sites, relay-and-combine, and every slow route through its detour.

use einsum_core::SeededRng as Rng;

use super::super::plan::SiteRoutes;
use super::{Rewrite, RewriteSite, aggregate_runs};
use crate::action::Action;
use crate::ids::SiteId;
use crate::program::Program;
use crate::rewrite::{Refusal, unguarded};

/// Relay introduction, preferably around a slow route (three times in four, where there is
/// one), half the time through its best relay, otherwise through any other site.
#[derive(Clone, Copy, Debug)]
pub struct IntroduceRelay;

impl Rewrite for IntroduceRelay {
    fn name(&self) -> &str {
        "introduce_relay"
    }
    fn weight(&self) -> usize {
        5
    }
    fn propose(&self, at: &mut RewriteSite<'_>) -> Option<Program> {
        let machine = at.machine;
        let slow: Vec<(&Action, SiteId, SiteId)> =
            at.sends.iter().copied().filter(|(_, s, d)| machine.relay(*s, *d).is_some()).collect();
        let pool = if !slow.is_empty() && at.rng.below(4) != 0 { &slow } else { &at.sends };
        let &(a, s, d) = at.rng.pick(pool)?;
        let relay = match machine.relay(s, d) {
            Some(w) if at.rng.below(2) == 0 => w,
            _ => {
                let others: Vec<SiteId> = machine.sites.iter().copied().filter(|w| *w != s && *w != d).collect();
                *at.rng.pick(&others)?
            }
        };
        unguarded::introduce_relay(at.program, a, d, relay).ok()
    }
}

/// Relay elimination: an action whose destination sources another action of its aggregate
/// sends that one's destination directly.
#[derive(Clone, Copy, Debug)]
pub struct EliminateRelay;

impl Rewrite for EliminateRelay {
    fn name(&self) -> &str {
        "eliminate_relay"
    }
    fn weight(&self) -> usize {
        1
    }
    fn propose(&self, at: &mut RewriteSite<'_>) -> Option<Program> {
        let runs = aggregate_runs(&at.body);
        let (body, runs) = (&at.body, &runs);
        let pairs: Vec<(&Action, &Action, SiteId)> = (0..body.len())
            .flat_map(|i| body[runs[i].clone()].iter().map(move |b| (body[i], *b)))
            .filter(|(a, _)| a.source_site().is_some())
            .filter_map(|(a, b)| b.source_site().filter(|r| a.dests.contains(r)).map(|_| (a, b)))
            .flat_map(|(a, b)| b.dests.iter().map(move |d| (a, b, *d)))
            .collect();
        let &(a, b, d) = at.rng.pick(&pairs)?;
        unguarded::eliminate_relay(at.program, a, b, d).ok()
    }
}

/// A transfer through two relays in a row (`relay_chain`).
#[derive(Clone, Copy, Debug)]
pub struct RelayChain;

impl Rewrite for RelayChain {
    fn name(&self) -> &str {
        "relay chain"
    }
    fn weight(&self) -> usize {
        1
    }
    fn propose(&self, at: &mut RewriteSite<'_>) -> Option<Program> {
        let &(a, s, d) = at.rng.pick(&at.sends)?;
        relay_chain(at.machine, at.rng, at.program, a, s, d).ok()
    }
}

/// Two transfers into one site from different sources, of disjoint aggregates, the second
/// relayed through the first's source and summed with it there (`relay_and_combine`).
#[derive(Clone, Copy, Debug)]
pub struct RelayAndCombine;

impl Rewrite for RelayAndCombine {
    fn name(&self) -> &str {
        "relay and combine"
    }
    fn weight(&self) -> usize {
        1
    }
    fn propose(&self, at: &mut RewriteSite<'_>) -> Option<Program> {
        // two transfers into one site from different sources, of disjoint aggregates;
        // in the order of the pairs of `sends`, but only the pairs into one site are
        // formed (`O(sends × sends into a site)`, not `O(sends²)`)
        let mut into: std::collections::HashMap<SiteId, Vec<usize>> = std::collections::HashMap::new();
        for (i, &(_, _, d)) in at.sends.iter().enumerate() {
            into.entry(d).or_default().push(i);
        }
        let (sends, into) = (&at.sends, &into);
        let all = sends.iter().flat_map(|&(x, r, d)| into[&d].iter().map(move |&j| (x, r, d, sends[j])));
        let mut cut = false;
        let pairs: Vec<(&Action, &Action, SiteId)> = super::super::budget::within(all, at.budget, &mut cut)
            .filter(|&(x, r, _, (y, q, _))| r != q && x.aggregate.is_disjoint(&y.aggregate))
            .map(|(x, _, d, (y, _, _))| (x, y, d))
            .collect();
        if cut {
            return None;
        }
        let &(x, y, d) = at.rng.pick(&pairs)?;
        relay_and_combine(at.program, x, y, d).ok()
    }
}

/// Every transfer along a route that has a faster two-hop detour sent through it
/// (`relay_slow_routes`).
#[derive(Clone, Copy, Debug)]
pub struct RelaySlowRoutes;

impl Rewrite for RelaySlowRoutes {
    fn name(&self) -> &str {
        "relay the slow routes"
    }
    fn weight(&self) -> usize {
        1
    }
    fn propose(&self, at: &mut RewriteSite<'_>) -> Option<Program> {
        relay_slow_routes(at.machine, at.program).ok()
    }
}

/// `action`'s transfer from `source` to `dest` through two relays in a row,
/// `source -> w1 -> w2 -> dest` (each the fastest two-hop detour of its leg half the
/// time, any other site otherwise): a route two single relay introductions reach only
/// through the intermediate program, which the annealing may have refused.
pub(crate) fn relay_chain(
    machine: &SiteRoutes,
    rng: &mut Rng,
    p: &Program,
    action: &Action,
    source: SiteId,
    dest: SiteId,
) -> Result<Program, Refusal> {
    let refuse = || Refusal::NotApplicable(format!("no relays for {action} to {dest}"));
    let pick = |from: SiteId, avoid: &[SiteId], rng: &mut Rng| -> Option<SiteId> {
        match machine.relay(from, dest) {
            Some(w) if !avoid.contains(&w) && rng.below(2) == 0 => Some(w),
            _ => {
                let others: Vec<SiteId> = machine.sites.iter().copied().filter(|w| !avoid.contains(w)).collect();
                rng.pick(&others).copied()
            }
        }
    };
    let w1 = pick(source, &[source, dest], rng).ok_or_else(refuse)?;
    let w2 = pick(w1, &[source, dest, w1], rng).ok_or_else(refuse)?;
    let first = unguarded::introduce_relay(p, action, dest, w1)?;
    unguarded::introduce_relay(&first, &Action::new(action.aggregate.clone(), w1, [dest]), dest, w2)
}

/// Every transfer along a route that has a faster two-hop detour
/// ([`SiteRoutes::relay`]) sent through it instead; refused if there is none.
pub(crate) fn relay_slow_routes(machine: &SiteRoutes, p: &Program) -> Result<Program, Refusal> {
    let slow: Vec<(Action, SiteId, SiteId)> = p
        .body
        .iter()
        .filter_map(|a| a.source_site().map(|s| (a, s)))
        .flat_map(|(a, s)| a.dests.iter().filter_map(move |&d| machine.relay(s, d).map(|w| (a.clone(), d, w))))
        .collect();
    if slow.is_empty() {
        return Err(Refusal::NotApplicable("no transfer has a faster detour".to_string()));
    }
    let mut result = p.clone();
    for (a, d, w) in slow {
        // an earlier relay may have split `a`'s destinations already
        let current = result
            .body
            .iter()
            .find(|b| b.aggregate == a.aggregate && b.source == a.source && b.dests.contains(&d))
            .cloned();
        if let Some(current) = current {
            result = unguarded::introduce_relay(&result, &current, d, w)?;
        }
    }
    Ok(result)
}

/// `y`'s transfer to `dest` relayed through `x`'s source and combined there with `x`'s
/// (`X @ r -> d`, `Y @ q -> d` become `Y @ q -> r`, `X+Y @ r -> d`): relay introduction
/// followed by an aggregation pushdown across rounds, which adds a partial sum at `r` that
/// neither rule alone forms.
pub(crate) fn relay_and_combine(p: &Program, x: &Action, y: &Action, dest: SiteId) -> Result<Program, Refusal> {
    let r = x
        .source_site()
        .ok_or_else(|| Refusal::NotApplicable(format!("{x} is sourced at a partition; the move needs a site")))?;
    let relayed = unguarded::introduce_relay(p, y, dest, r)?;
    // `x` is untouched (its source is not `y`'s), and the relay added `Y @ r -> dest`
    unguarded::pushdown(&relayed, x, &Action::new(y.aggregate.clone(), r, [dest]), dest)
}
