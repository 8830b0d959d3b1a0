//! The DGX machines the paper evaluates on (figures from DESIGN.md).
//!
//! - `dgx-h100`, `dgx-a100`: a non-blocking NVSwitch, so the only contention is at the
//!   endpoints: every GPU has an egress and an ingress cap and no links.
//! - `dgx-v100`: the real DGX-1V hybrid cube-mesh as `nvidia-smi topo -m` reports it, with
//!   no endpoint caps: each NVLink direction is its own resource, and the 12 unlinked pairs
//!   share one PCIe bridge of 15.75 GB/s. The V100 has no bf16 tensor cores, so its bf16 rate
//!   is its f32 rate.

use crate::error::TopologyError;
use crate::topology::{ComputeRates, Fallback, GB, Link, Site, Topology};

/// The preset names [`Topology::preset`] accepts.
pub const PRESETS: &[&str] = &["dgx-a100", "dgx-h100", "dgx-v100"];

/// The DGX-1V double NVLinks (two bonded links, 50 GB/s each way).
pub const V100_DOUBLE_LINKS: [(usize, usize); 8] = [(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)];
/// The DGX-1V single NVLinks (25 GB/s each way).
pub const V100_SINGLE_LINKS: [(usize, usize); 8] = [(0, 1), (0, 2), (1, 3), (2, 6), (3, 7), (4, 5), (4, 6), (5, 7)];
/// The name of the DGX-1V's shared PCIe bridge resource.
pub const PCIE_BRIDGE: &str = "pcie-bridge";

fn switched(name: &str, gbps: f64, hbm_gbps: f64, hbm_gb: f64, compute: ComputeRates) -> Topology {
    let site = Site::new(hbm_gbps, hbm_gb, compute).with_endpoint_caps(gbps);
    Topology::new(name, vec![site; 8], vec![], Some(Fallback::Switch)).expect("switched presets are valid")
}

fn dgx_v100() -> Topology {
    let site = Site::new(900.0, 32.0, ComputeRates::tflops(125.0, 15.7, 15.7));
    let links = V100_DOUBLE_LINKS
        .iter()
        .map(|&(a, b)| Link::gbps(a, b, 50.0))
        .chain(V100_SINGLE_LINKS.iter().map(|&(a, b)| Link::gbps(a, b, 25.0)))
        .collect();
    let bridge = Fallback::Shared { name: PCIE_BRIDGE.to_string(), bandwidth: 15.75 * GB };
    Topology::new("dgx-v100", vec![site; 8], links, Some(bridge)).expect("the dgx-v100 preset is valid")
}

impl Topology {
    /// The preset called `name` (one of [`PRESETS`]); an unknown name is an error that lists
    /// the presets.
    pub fn preset(name: &str) -> Result<Topology, TopologyError> {
        match name {
            "dgx-h100" => Ok(switched(name, 450.0, 3350.0, 80.0, ComputeRates::tflops(989.0, 989.0, 67.0))),
            "dgx-a100" => Ok(switched(name, 300.0, 1555.0, 40.0, ComputeRates::tflops(312.0, 312.0, 19.5))),
            "dgx-v100" => Ok(dgx_v100()),
            _ => Err(TopologyError::UnknownPreset { name: name.to_string(), known: PRESETS.join(", ") }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::SiteId;

    #[test]
    fn every_preset_builds_and_unknown_names_list_them() {
        for name in PRESETS {
            assert_eq!(Topology::preset(name).expect("preset").name(), *name);
        }
        let err = Topology::preset("dgx-b200").unwrap_err().to_string();
        assert!(err.contains("dgx-b200") && err.contains("dgx-a100, dgx-h100, dgx-v100"), "{err}");
    }

    #[test]
    fn v100_link_map_has_16_links_and_12_bridged_pairs() {
        let t = Topology::preset("dgx-v100").expect("preset");
        let mut bridged = 0;
        for a in 0..8 {
            for b in (a + 1)..8 {
                let bw = t.route_bandwidth(SiteId(a), SiteId(b)).expect("route");
                let expected = if V100_DOUBLE_LINKS.contains(&(a, b)) {
                    50.0 * GB
                } else if V100_SINGLE_LINKS.contains(&(a, b)) {
                    25.0 * GB
                } else {
                    bridged += 1;
                    assert_eq!(t.route(SiteId(a), SiteId(b)), t.shared_resource().map(|r| vec![r]));
                    15.75 * GB
                };
                assert_eq!(bw, expected, "{a}-{b}");
                assert_eq!(t.route_bandwidth(SiteId(b), SiteId(a)), Some(expected));
            }
        }
        assert_eq!(bridged, 12);
        // every GPU has six NVLink lanes: doubles count twice
        for s in 0..8 {
            let lanes: usize = V100_DOUBLE_LINKS.iter().filter(|(a, b)| *a == s || *b == s).count() * 2
                + V100_SINGLE_LINKS.iter().filter(|(a, b)| *a == s || *b == s).count();
            assert_eq!(lanes, 6, "site {s}");
        }
    }

    #[test]
    fn switched_presets_route_through_both_endpoints() {
        let t = Topology::preset("dgx-h100").expect("preset");
        let route = t.route(SiteId(2), SiteId(5)).expect("route");
        let names: Vec<_> = route.iter().map(|r| t.resource(*r).expect("resource").name()).collect();
        assert_eq!(names, ["egress[2]", "ingress[5]"]);
        assert_eq!(t.route_bandwidth(SiteId(2), SiteId(5)), Some(450.0 * GB));
        assert_eq!(t.sites()[0].hbm_capacity, 80.0 * GB);
        let a = Topology::preset("dgx-a100").expect("preset");
        assert_eq!(a.sites()[7].hbm_bandwidth, 1555.0 * GB);
        assert_eq!(a.route_bandwidth(SiteId(0), SiteId(7)), Some(300.0 * GB));
    }
}
