//! The decongesting move of the search: take the most loaded resource (link, or the PCIe
//! bridge) under a program's transfers and move one transfer off it, through a relay or from
//! another site that holds its aggregate, where the resources it then crosses are less
//! loaded. The random rewrites pick a transfer and a relay blindly; this one aims at the
//! bottleneck, which on a machine of uneven links (the DGX-V100's single and double NVLinks)
//! the seeds' trees and rings leave where several groups' routes meet.

use std::collections::BTreeSet;

use super::plan::{Load, SiteRoutes};
use crate::action::Action;
use crate::ids::SiteId;
use crate::program::Program;
use crate::rewrite::{Refusal, unguarded};
use einsum_core::SeededRng as Rng;

/// How a transfer leaves the busiest resource.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Reroute {
    /// Through this site (relay introduction).
    Relay(SiteId),
    /// From this site, which also holds the aggregate (source substitution).
    Source(SiteId),
}

/// `p` with one transfer crossing its most loaded resource rerouted (the transfer picked at
/// random among those, weighted equally): relayed through the site, or sent from the other
/// holder of its aggregate, whose new route's busiest resource would be least loaded, if
/// that is under the load it leaves; refused when no transfer can be moved off. Loads are
/// static (the bytes every transfer puts on each resource over the whole program, divided by
/// its capacity), a proxy of the simulation's congestion; `preamble` declares the atoms' sizes.
pub(crate) fn decongest(
    p: &Program,
    preamble: &Program,
    machine: &SiteRoutes,
    rng: &mut Rng,
) -> Result<Program, Refusal> {
    let sends: Vec<(&Action, SiteId, SiteId, f64)> = p
        .body
        .iter()
        .filter_map(|a| a.source_site().map(|s| (a, s, preamble.aggregate_gb(&a.aggregate))))
        .flat_map(|(a, s, bytes)| a.dests.iter().map(move |&d| (a, s, d, bytes)))
        .collect();
    let mut load = Load::new();
    for &(_, s, d, bytes) in &sends {
        machine.add_load(&mut load, s, d, bytes);
    }
    let times: Vec<f64> = sends.iter().map(|&(_, s, d, _)| machine.route_time(&load, s, d)).collect();
    let busiest = times.iter().copied().filter(|t| t.is_finite()).fold(0.0, f64::max);
    let crossing: Vec<usize> = (0..sends.len()).filter(|&i| times[i] >= busiest * (1.0 - 1e-9)).collect();
    let refuse = || Refusal::NotApplicable("no transfer can leave the busiest resource".to_string());
    let &i = rng.pick(&crossing).ok_or_else(refuse)?;
    let (action, s, d, bytes) = sends[i];
    machine.add_load(&mut load, s, d, -bytes);
    // sites that hold the aggregate at some point: sources and destinations of its actions
    let holders: BTreeSet<SiteId> = p
        .body
        .iter()
        .filter(|b| b.aggregate == action.aggregate)
        .flat_map(|b| b.source_site().into_iter().chain(b.dests.iter().copied()))
        .filter(|&w| w != s && w != d)
        .collect();
    let mut best: Option<(f64, Reroute)> = None;
    for &w in machine.sites.iter().filter(|&&w| w != s && w != d) {
        let mut reroutes = vec![(vec![(s, w), (w, d)], Reroute::Relay(w))];
        if holders.contains(&w) {
            reroutes.push((vec![(w, d)], Reroute::Source(w)));
        }
        for (legs, reroute) in reroutes {
            let mut after = load.clone();
            for &(x, y) in &legs {
                machine.add_load(&mut after, x, y, bytes);
            }
            let time = legs.iter().map(|&(x, y)| machine.route_time(&after, x, y)).fold(0.0, f64::max);
            if time < busiest * (1.0 - 1e-9) && best.is_none_or(|(t, _)| time < t) {
                best = Some((time, reroute));
            }
        }
    }
    match best.ok_or_else(refuse)?.1 {
        Reroute::Relay(w) => unguarded::introduce_relay(p, action, d, w),
        Reroute::Source(w) => unguarded::substitute_source(p, action, d, w),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::simulate;
    use einsum_sim::Topology;

    #[test]
    fn the_busiest_link_sheds_a_transfer_onto_a_free_relay() {
        // two atoms over the single 0-1 link of the DGX-V100: one goes through a site with a
        // double link to one end and a single to the other, which halves the link's load
        let t = Topology::preset("dgx-v100").unwrap();
        let gpus = "GPUS: 0, 1, 2, 3, 4, 5, 6, 7\nIN: A @ 0; B @ 0\nOUT: A @ 1; B @ 1\n";
        let p = crate::load(&format!("{gpus}A @ 0 -> 1; B @ 0 -> 1\n")).unwrap();
        let machine = SiteRoutes::new(&p.sites(), &t);
        let moved = decongest(&p, &p, &machine, &mut Rng::new(0)).unwrap();
        assert!(moved.validate().is_ok(), "{moved}");
        assert_eq!(moved.body.len(), 3, "{moved}");
        let before = simulate(&p, &t).unwrap().completion_ms;
        let after = simulate(&moved, &t).unwrap().completion_ms;
        assert!(after < 0.9 * before, "{after} ms after, {before} ms before: {moved}");
    }

    #[test]
    fn nothing_moves_where_every_alternative_is_as_loaded() {
        // one transfer on a double link: any detour crosses a link at least as slow
        let t = Topology::preset("dgx-v100").unwrap();
        let p = crate::load("GPUS: 0, 1, 2, 3, 4, 5, 6, 7\nIN: A @ 0\nOUT: A @ 3\nA @ 0 -> 3\n").unwrap();
        let machine = SiteRoutes::new(&p.sites(), &t);
        assert!(matches!(decongest(&p, &p, &machine, &mut Rng::new(0)), Err(Refusal::NotApplicable(_))));
    }
}
