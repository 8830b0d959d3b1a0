//! The requirements of the classic collectives over `n` sites, as ExProg preambles, and
//! their bandwidth lower bounds (`einsum_sim::all_reduce_bound` and the like), to measure synthesized programs against.
//!
//! Each site holds `total_gb` of data (all-gather: each holds `total_gb / n` and ends with
//! `total_gb`):
//!
//! - [`all_reduce`]: site `i` holds its array as `n` chunk atoms `X{i}_{j}`; every site must
//!   end with every chunk's sum `X0_j+...+X{n-1}_j`. Chunking leaves room for
//!   reduce-scatter/all-gather and ring schedules; the naive program is the same as for
//!   whole arrays.
//! - [`reduce_scatter`]: the same atoms; site `j` must end with the sum of the `j`-th chunks.
//! - [`all_gather`]: site `i` holds atom `X{i}`; every site must end with every atom.
//! - [`all_reduce_whole`]: the all-reduce of one indivisible atom per site (the gradient
//!   partials of a data-parallel step): only atom refinement can chunk it.

use std::collections::BTreeSet;

use einsum_sim::{GB, Topology, all_gather_bound, all_reduce_bound, reduce_scatter_bound};

use crate::aggregate::Aggregate;
use crate::ids::{AtomId, SiteId};
use crate::program::{Input, Program, Requirement};
use crate::target::Target;

/// The collectives [`Collective::preamble`] builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Collective {
    /// Every site ends with the sum of all sites' arrays.
    AllReduce,
    /// Every site ends with every site's slice.
    AllGather,
    /// Site `j` ends with the sum of every site's `j`-th chunk.
    ReduceScatter,
}

impl Collective {
    /// All three.
    pub const ALL: [Collective; 3] = [Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter];

    /// `all-reduce`, `all-gather` or `reduce-scatter`.
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all-reduce",
            Collective::AllGather => "all-gather",
            Collective::ReduceScatter => "reduce-scatter",
        }
    }

    /// The preamble over sites `0..sites` with `total_gb` per site.
    pub fn preamble(self, sites: usize, total_gb: f64) -> Program {
        match self {
            Collective::AllReduce => all_reduce(sites, total_gb),
            Collective::AllGather => all_gather(sites, total_gb),
            Collective::ReduceScatter => reduce_scatter(sites, total_gb),
        }
    }

    /// The bandwidth lower bound in ms for `total_gb` per site over `sites` sites of
    /// `topology`, with [`per_site_bandwidth`] as the per-site bandwidth.
    pub fn bound_ms(self, sites: usize, total_gb: f64, topology: &Topology) -> f64 {
        let (bytes, b) = (total_gb * GB, per_site_bandwidth(topology, sites));
        1e3 * match self {
            Collective::AllReduce => all_reduce_bound(bytes, sites, b),
            Collective::AllGather => all_gather_bound(bytes, sites, b),
            Collective::ReduceScatter => reduce_scatter_bound(bytes, sites, b),
        }
    }

    /// A lower bound in ms on the traffic between nodes of the collective of `total_gb` per
    /// site over every site of `topology`, a machine of `N ≥ 2` nodes of `k` sites each,
    /// every site with its own NIC; `None` on any other machine.
    ///
    /// Cut one node `A` from the others. All-reduce: with the nodes as the processes, the
    /// classic all-reduce bound says `2·(N − 1)/N · S` bytes leave `A` (for `N = 2`, every
    /// sum the other node ends with depends on `A`'s inputs: `S` bytes cross each way).
    /// Reduce-scatter: the `k·(N − 1)` sites outside `A` each need a sum of `S/(kN)` bytes
    /// that depends on `A`'s inputs: `(N − 1)/N · S` leave `A`. All-gather: `A`'s sites need
    /// the `k·(N − 1)` atoms of `S/(kN)` bytes held outside it: `(N − 1)/N · S` enter `A`.
    /// Those bytes cross `A`'s `k` NICs, each at most the slowest NIC's bytes/s.
    pub fn inter_node_bound_ms(self, total_gb: f64, topology: &Topology) -> Option<f64> {
        let nodes = topology.nodes()?;
        let k = nodes.block_size()?;
        let n = nodes.count() as f64;
        let nic = topology
            .sites()
            .iter()
            .map(|s| s.nic)
            .collect::<Option<Vec<f64>>>()?
            .into_iter()
            .fold(f64::INFINITY, f64::min);
        let s = total_gb * GB;
        let crossing = match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n * s,
            Collective::ReduceScatter | Collective::AllGather => (n - 1.0) / n * s,
        };
        Some(1e3 * crossing / (k as f64 * nic))
    }
}

/// The most a site can send per second, the smallest over the first `sites` sites of their
/// [`Topology::max_injection_bandwidth`] (so the bound stays a lower bound). Infinite on a
/// switch with no caps.
pub fn per_site_bandwidth(topology: &Topology, sites: usize) -> f64 {
    (0..sites.min(topology.num_sites()))
        .filter_map(|i| topology.max_injection_bandwidth(einsum_sim::SiteId(i)))
        .fold(f64::INFINITY, f64::min)
}

fn atom(name: String) -> AtomId {
    AtomId::new(&name).expect("generated atom names are identifiers")
}

fn base(sites: usize) -> Program {
    Program { gpus: Some((0..sites).map(SiteId).collect()), ..Program::default() }
}

/// Chunk atoms `X{i}_{j}` of `total_gb / sites` GB each at site `i`.
fn chunked(sites: usize, total_gb: f64) -> Program {
    let mut p = base(sites);
    let size_gb = total_gb / sites.max(1) as f64;
    for i in 0..sites {
        for j in 0..sites {
            p.inputs.insert(atom(format!("X{i}_{j}")), Input { site: SiteId(i), size_gb });
        }
    }
    p
}

/// The sum of every site's `j`-th chunk.
fn chunk_sum(sites: usize, j: usize) -> Aggregate {
    Aggregate::new((0..sites).map(|i| atom(format!("X{i}_{j}")))).expect("at least one site")
}

/// All-reduce of `total_gb` per site over sites `0..sites` (see the module docs).
pub fn all_reduce(sites: usize, total_gb: f64) -> Program {
    let mut p = chunked(sites, total_gb);
    for j in 0..sites {
        for t in 0..sites {
            p.outputs.insert(Requirement::new(chunk_sum(sites, j), Target::Site(SiteId(t))));
        }
    }
    p
}

/// All-reduce of indivisible partials: site `i` holds one atom `X{i}` of `total_gb`, and
/// every site must end with `X0+...+X{n-1}`. Nothing in the preamble is cut, so only atom
/// refinement ([`crate::refine`]) lets a synthesized program pipeline or reduce-scatter it.
pub fn all_reduce_whole(sites: usize, total_gb: f64) -> Program {
    let mut p = base(sites);
    let all: Vec<AtomId> = (0..sites).map(|i| atom(format!("X{i}"))).collect();
    for (i, x) in all.iter().enumerate() {
        p.inputs.insert(x.clone(), Input { site: SiteId(i), size_gb: total_gb });
    }
    if let Ok(sum) = Aggregate::new(all) {
        for t in 0..sites {
            p.outputs.insert(Requirement::new(sum.clone(), Target::Site(SiteId(t))));
        }
    }
    p
}

/// Reduce-scatter of `total_gb` per site over sites `0..sites` (see the module docs).
pub fn reduce_scatter(sites: usize, total_gb: f64) -> Program {
    let mut p = chunked(sites, total_gb);
    for j in 0..sites {
        p.outputs.insert(Requirement::new(chunk_sum(sites, j), Target::Site(SiteId(j))));
    }
    p
}

/// All-gather to `total_gb` per site over sites `0..sites` (see the module docs).
pub fn all_gather(sites: usize, total_gb: f64) -> Program {
    let mut p = base(sites);
    let size_gb = total_gb / sites.max(1) as f64;
    let all: BTreeSet<usize> = (0..sites).collect();
    for i in 0..sites {
        let x = atom(format!("X{i}"));
        p.inputs.insert(x.clone(), Input { site: SiteId(i), size_gb });
        for &t in &all {
            p.outputs.insert(Requirement::new(Aggregate::atom(x.clone()), Target::Site(SiteId(t))));
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preambles_check_and_round_trip() {
        for c in Collective::ALL {
            let p = c.preamble(8, 1.0);
            p.check().unwrap();
            assert_eq!(p.to_string().parse::<Program>().unwrap(), p, "{}", c.name());
        }
        assert_eq!(all_reduce(8, 1.0).outputs.len(), 64);
        assert_eq!(reduce_scatter(8, 1.0).outputs.len(), 8);
        assert_eq!(all_gather(8, 1.0).inputs.len(), 8);
        assert_eq!(all_reduce(0, 1.0), base(0));
    }

    #[test]
    fn per_site_bandwidths_of_the_presets() {
        let a100 = Topology::preset("dgx-a100").unwrap();
        assert_eq!(per_site_bandwidth(&a100, 8), 300.0 * GB);
        let v100 = Topology::preset("dgx-v100").unwrap();
        // six 25 GB/s NVLink lanes, plus the shared bridge
        assert_eq!(per_site_bandwidth(&v100, 8), 165.75 * GB);
        let bound = Collective::AllReduce.bound_ms(8, 1.0, &a100);
        assert!((bound - 2.0 * 7.0 / 8.0 / 300.0 * 1e3).abs() < 1e-9);
    }

    #[test]
    fn inter_node_bounds_only_on_machines_of_several_nodes() {
        let a100 = Topology::preset("dgx-a100").unwrap();
        assert_eq!(Collective::AllReduce.inter_node_bound_ms(1.0, &a100), None);
        // four nodes of 8 H100s, 50 GB/s NICs: 2·3/4 GB out of a node through 8 NICs
        let h100x4 = Topology::preset("dgx-h100x4").unwrap();
        let bound = Collective::AllReduce.inter_node_bound_ms(1.0, &h100x4).unwrap();
        assert!((bound - 1.5 / 400.0 * 1e3).abs() < 1e-9, "{bound}");
        let bound = Collective::AllGather.inter_node_bound_ms(1.0, &h100x4).unwrap();
        assert!((bound - 0.75 / 400.0 * 1e3).abs() < 1e-9, "{bound}");
    }
}
