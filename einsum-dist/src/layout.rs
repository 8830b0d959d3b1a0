//! Which rank of a multi-process job owns which of a plan's devices.
//!
//! Ranks own contiguous, equal blocks of devices: rank `r` of `ranks` owns devices
//! `[r * k, (r + 1) * k)` with `k = devices / ranks`. Contiguous blocks keep a rank's devices
//! neighbours in the plan (and, on the presets, on one node), and equal blocks give every
//! rank the same share of the work.

use std::ops::Range;

use einsum_sim::{SiteId, Topology};
use thiserror::Error;

/// Why a split of devices over ranks is refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LayoutError {
    /// A job needs at least one rank.
    #[error("a rank layout needs at least one rank")]
    ZeroRanks,
    /// A plan needs at least one device.
    #[error("a rank layout needs at least one device")]
    ZeroDevices,
    /// Some rank would own no device.
    #[error("{ranks} ranks over {devices} devices: more ranks than devices")]
    MoreRanksThanDevices {
        /// The ranks asked for.
        ranks: usize,
        /// The plan's devices.
        devices: usize,
    },
    /// The ranks cannot own equal blocks of devices.
    #[error("{ranks} ranks do not divide {devices} devices into equal blocks")]
    Uneven {
        /// The ranks asked for.
        ranks: usize,
        /// The plan's devices.
        devices: usize,
    },
    /// The plan has more devices than the machine has sites.
    #[error("{devices} devices, but topology `{topology}` has only {sites} sites")]
    DevicesOverSites {
        /// The plan's devices.
        devices: usize,
        /// The topology's name.
        topology: String,
        /// The topology's sites.
        sites: usize,
    },
    /// A rank's devices would be in two nodes: one process would drive GPUs of two hosts.
    #[error(
        "rank {rank} would own devices {}..{}, which span node {first_node} (device {}) and node {other_node} (device {other_device})",
        devices.start, devices.end, devices.start
    )]
    RankSpansNodes {
        /// The rank.
        rank: usize,
        /// Its devices.
        devices: Range<usize>,
        /// The node of its first device.
        first_node: usize,
        /// The first of its devices in another node.
        other_device: usize,
        /// That device's node.
        other_node: usize,
    },
}

/// Which rank owns which device: `ranks` equal, contiguous blocks of `devices` devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankLayout {
    devices: usize,
    ranks: usize,
}

impl RankLayout {
    /// `devices` devices over `ranks` ranks, rank `r` owning `[r * k, (r + 1) * k)` with
    /// `k = devices / ranks`; refused unless `0 < ranks <= devices` and `ranks` divides
    /// `devices` (equal blocks, so every rank carries the same share).
    pub fn contiguous(devices: usize, ranks: usize) -> Result<RankLayout, LayoutError> {
        if ranks == 0 {
            return Err(LayoutError::ZeroRanks);
        }
        if devices == 0 {
            return Err(LayoutError::ZeroDevices);
        }
        if ranks > devices {
            return Err(LayoutError::MoreRanksThanDevices { ranks, devices });
        }
        if !devices.is_multiple_of(ranks) {
            return Err(LayoutError::Uneven { ranks, devices });
        }
        Ok(RankLayout { devices, ranks })
    }

    /// [`RankLayout::contiguous`] for a plan on `topology`'s first `devices` sites, refused
    /// when the plan has more devices than the topology has sites, or when a rank would own
    /// devices of two different nodes: a rank is one process on one host, so its GPUs must
    /// be in one node (several ranks may share a node). A topology of one node accepts any
    /// contiguous split.
    pub fn for_topology(topology: &Topology, devices: usize, ranks: usize) -> Result<RankLayout, LayoutError> {
        let layout = RankLayout::contiguous(devices, ranks)?;
        if devices > topology.num_sites() {
            return Err(LayoutError::DevicesOverSites {
                devices,
                topology: topology.name().to_string(),
                sites: topology.num_sites(),
            });
        }
        if topology.nodes().is_some() {
            let node = |d: usize| topology.node(SiteId(d)).expect("checked: the device is a site");
            for rank in 0..ranks {
                let own = layout.devices_of(rank);
                let first_node = node(own.start);
                if let Some(other_device) = own.clone().find(|&d| node(d) != first_node) {
                    return Err(LayoutError::RankSpansNodes {
                        rank,
                        devices: own,
                        first_node,
                        other_device,
                        other_node: node(other_device),
                    });
                }
            }
        }
        Ok(layout)
    }

    /// How many ranks.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// How many devices, over all ranks.
    pub fn devices(&self) -> usize {
        self.devices
    }

    /// How many devices each rank owns.
    pub fn devices_per_rank(&self) -> usize {
        self.devices / self.ranks
    }

    /// The rank that owns `device`.
    ///
    /// # Panics
    /// When `device >= self.devices()`.
    pub fn rank_of(&self, device: usize) -> usize {
        assert!(device < self.devices, "device {device} is not in a layout of {} devices", self.devices);
        device / self.devices_per_rank()
    }

    /// The devices `rank` owns.
    ///
    /// # Panics
    /// When `rank >= self.ranks()`.
    pub fn devices_of(&self, rank: usize) -> Range<usize> {
        assert!(rank < self.ranks, "rank {rank} is not in a layout of {} ranks", self.ranks);
        let k = self.devices_per_rank();
        rank * k..(rank + 1) * k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_devices_split_into_contiguous_equal_blocks() {
        for (ranks, owners) in [
            (1, [0, 0, 0, 0, 0, 0, 0, 0]),
            (2, [0, 0, 0, 0, 1, 1, 1, 1]),
            (4, [0, 0, 1, 1, 2, 2, 3, 3]),
            (8, [0, 1, 2, 3, 4, 5, 6, 7]),
        ] {
            let l = RankLayout::contiguous(8, ranks).expect("ranks divide 8");
            assert_eq!((l.ranks(), l.devices(), l.devices_per_rank()), (ranks, 8, 8 / ranks));
            let got: Vec<usize> = (0..8).map(|d| l.rank_of(d)).collect();
            assert_eq!(got, owners, "{ranks} ranks");
            for r in 0..ranks {
                let k = 8 / ranks;
                assert_eq!(l.devices_of(r), r * k..(r + 1) * k);
                assert!(l.devices_of(r).all(|d| l.rank_of(d) == r));
            }
        }
    }

    #[test]
    fn bad_splits_are_refused_with_the_numbers() {
        assert_eq!(RankLayout::contiguous(8, 3), Err(LayoutError::Uneven { ranks: 3, devices: 8 }));
        assert_eq!(RankLayout::contiguous(8, 16), Err(LayoutError::MoreRanksThanDevices { ranks: 16, devices: 8 }));
        assert_eq!(RankLayout::contiguous(8, 0), Err(LayoutError::ZeroRanks));
        assert_eq!(RankLayout::contiguous(0, 1), Err(LayoutError::ZeroDevices));
        let msg = RankLayout::contiguous(8, 3).unwrap_err().to_string();
        assert!(msg.contains('3') && msg.contains('8'), "{msg}");
    }

    #[test]
    #[should_panic(expected = "device 8")]
    fn a_device_outside_the_layout_has_no_rank() {
        RankLayout::contiguous(8, 2).expect("even").rank_of(8);
    }

    #[test]
    fn two_dgx_nodes_take_ranks_within_a_node() {
        let t = Topology::preset("dgx-a100x2").expect("preset");
        // The preset: 16 sites, 0..8 in node 0 and 8..16 in node 1.
        let nodes: Vec<usize> = (0..16).map(|s| t.node(SiteId(s)).expect("a site")).collect();
        assert_eq!(nodes, [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]);
        for ranks in [2, 4, 8, 16] {
            let l = RankLayout::for_topology(&t, 16, ranks).expect("a rank within a node");
            assert_eq!(l, RankLayout::contiguous(16, ranks).expect("even"));
        }
        assert_eq!(
            RankLayout::for_topology(&t, 16, 1),
            Err(LayoutError::RankSpansNodes { rank: 0, devices: 0..16, first_node: 0, other_device: 8, other_node: 1 })
        );
        // 12 devices over 2 ranks: rank 0 owns 0..6 (node 0), rank 1 owns 6..12 (both nodes).
        let e = RankLayout::for_topology(&t, 12, 2).unwrap_err();
        assert_eq!(
            e,
            LayoutError::RankSpansNodes { rank: 1, devices: 6..12, first_node: 0, other_device: 8, other_node: 1 }
        );
        assert!(e.to_string().contains("rank 1 would own devices 6..12"), "{e}");
        assert!(matches!(
            RankLayout::for_topology(&t, 32, 4),
            Err(LayoutError::DevicesOverSites { devices: 32, sites: 16, .. })
        ));
    }

    #[test]
    fn one_node_accepts_any_even_split() {
        let t = Topology::preset("dgx-a100").expect("preset");
        assert!(t.nodes().is_none());
        assert_eq!(RankLayout::for_topology(&t, 8, 1), RankLayout::contiguous(8, 1));
        assert_eq!(RankLayout::for_topology(&t, 8, 3), Err(LayoutError::Uneven { ranks: 3, devices: 8 }));
    }
}
