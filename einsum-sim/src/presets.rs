//! Machines by name: the DGX servers the paper evaluates on, clusters of DGX nodes, and a
//! GB200 NVL72 rack. Rates are vendor peak figures (dense, in decimal GB and TFLOP).
//!
//! - `dgx-h100`, `dgx-a100`: a non-blocking NVSwitch, so the only contention is at the
//!   endpoints: every GPU has an egress and an ingress cap and no links (NVIDIA's A100 and
//!   H100 SXM datasheets: A100 SXM 40 GB, 1555 GB/s HBM, 312 TFLOP/s f16/bf16 and 19.5 f32, 300 GB/s
//!   NVLink per direction; H100 SXM 80 GB, 3350 GB/s HBM, 989 TFLOP/s f16/bf16 and 67 f32,
//!   450 GB/s NVLink per direction).
//! - `dgx-v100`: the real DGX-1V hybrid cube-mesh as `nvidia-smi topo -m` reports it, with
//!   no endpoint caps: each NVLink direction is its own resource, and the 12 unlinked pairs
//!   share one PCIe bridge of 15.75 GB/s (PCIe 3.0 x16). The V100 has no bf16 tensor cores, so its bf16 rate
//!   is its f32 rate.
//! - `dgx-a100xN`, `dgx-h100xN` (any `N` ≥ 1, at most [`MAX_SITES`] sites): `N` such
//!   nodes, sites `8k..8k+8` in node `k`, each node's NVSwitch as in the single-node preset.
//!   Between nodes every GPU has its own InfiniBand NIC, the way the DGX user guides list
//!   the compute fabric ports: the DGX A100 has eight single-port ConnectX-6 VPI HDR
//!   adapters, 200 Gb/s = 25 GB/s per direction each; the DGX H100 eight ConnectX-7 NDR
//!   ports, 400 Gb/s = 50 GB/s per direction each. The fabric is non-blocking (the DGX
//!   SuperPOD reference architectures build a full-bisection fat tree, one rail per GPU
//!   index), so a transfer between nodes crosses only the sender's NIC egress and the
//!   receiver's NIC ingress; GPUDirect RDMA moves it GPU→PCIe→NIC, not over NVLink (see
//!   `nodes.rs`).
//!   `dgx-a100x1` is `dgx-a100` (named so), and likewise for the H100.
//! - `nvl72`: a GB200 NVL72 rack, 72 Blackwell GPUs in one NVLink switch domain: 900 GB/s
//!   per GPU per direction (fifth-generation NVLink, 1.8 TB/s bidirectional; the rack's
//!   130 TB/s is 72 × 1.8 TB/s), so it is switched like the DGX presets, with 72 sites. HBM
//!   192 GB at 8 TB/s per GPU (GTC 2024: 384 GB HBM3e and 16 TB/s per two-GPU GB200
//!   superchip; NVIDIA's later tables list 186 GB). Compute from NVIDIA's GB200 NVL72
//!   specifications (nvidia.com/en-us/data-center/gb200-nvl72/, per GB200 superchip of two
//!   GPUs): FP16/BF16 Tensor Core 10 PFLOPS *with sparsity*, so 2,500 TFLOP/s dense per GPU;
//!   FP32 160 TFLOPS (non-tensor, no sparsity), so 80 TFLOP/s per GPU. Its NICs are not
//!   modelled: the rack is one node.
//! - `h200`: one H200 SXM on its own, the machine a single-GPU run is measured on: the
//!   H100 SXM's processor (132 SMs, its clocks, so 989 TFLOP/s f16/bf16 dense and 67 f32)
//!   with 141 GB of HBM3e at 4800 GB/s (NVIDIA's H200 datasheet). One site, so it plans for
//!   one device; its NVLink (450 GB/s per direction, as the H100's) is given for a file that
//!   copies the site into a machine of several.
//!
//! Every preset also gives each GPU its SM count (whitepaper figures, `efficiency.rs`:
//! 108 on the A100, 132 on the H100, 80 on the V100, 148 on the B200) and the machine its
//! latencies (`latency.rs`: 2 µs per graph-launched kernel, 3 µs per NVLink or NVSwitch
//! transfer, 10 µs through the DGX-1V's PCIe bridge, 5 µs between nodes over InfiniBand).
//! [`Topology::with_latency`] with [`Latency::ZERO`] gives the pure fluid model of the same
//! machine.
//!
//! Every preset serves the transfers of one ordered pair of GPUs in issue order
//! ([`LinkService::Fifo`], `service.rs`): a real runtime moves a pair's bytes through one
//! stream or one NCCL connection, in order. [`Topology::with_service`] with
//! [`LinkService::Fair`] gives the paper's max-min model of the same machine.

use crate::efficiency::{A100_SMS, B200_SMS, H100_SMS, V100_SMS};
use crate::error::TopologyError;
use crate::latency::{A100_LATENCY, H100_LATENCY, Latency, NVL72_LATENCY, V100_LATENCY};
use crate::nodes::{Fabric, Nodes};
use crate::service::LinkService;
use crate::topology::{ComputeRates, Fallback, GB, Link, MAX_SITES, Site, Topology};

/// The preset names [`Topology::preset`] accepts as they are; it also accepts every form of
/// [`NODE_PRESETS`].
pub const PRESETS: &[&str] = &["dgx-a100", "dgx-h100", "dgx-v100", "nvl72", "h200"];

/// The presets of `N` nodes, written with `N` for the number of nodes (`dgx-a100x4`).
pub const NODE_PRESETS: &[&str] = &["dgx-a100xN", "dgx-h100xN"];

/// GPUs in one DGX node.
pub const GPUS_PER_NODE: usize = 8;

/// The DGX-1V double NVLinks (two bonded links, 50 GB/s each way).
pub const V100_DOUBLE_LINKS: [(usize, usize); 8] = [(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)];
/// The DGX-1V single NVLinks (25 GB/s each way).
pub const V100_SINGLE_LINKS: [(usize, usize); 8] = [(0, 1), (0, 2), (1, 3), (2, 6), (3, 7), (4, 5), (4, 6), (5, 7)];
/// The name of the DGX-1V's shared PCIe bridge resource.
pub const PCIE_BRIDGE: &str = "pcie-bridge";

/// Every preset name and form, comma-separated, for help and errors.
pub fn preset_forms() -> String {
    let mut all: Vec<&str> = PRESETS.to_vec();
    all.extend(NODE_PRESETS);
    format!("{} (N nodes of {GPUS_PER_NODE} GPUs)", all.join(", "))
}

/// One DGX GPU: its site in a node, and its NIC in GB/s per direction.
struct DgxGpu {
    /// NVSwitch port in GB/s per direction.
    nvswitch_gbps: f64,
    hbm_gbps: f64,
    hbm_gb: f64,
    compute: ComputeRates,
    nic_gbps: f64,
    sms: usize,
    latency: Latency,
}

/// The GPU of a DGX family (`dgx-a100`, `dgx-h100`), or `None` for another name.
fn dgx_gpu(family: &str) -> Option<DgxGpu> {
    match family {
        "dgx-a100" => Some(DgxGpu {
            nvswitch_gbps: 300.0,
            hbm_gbps: 1555.0,
            hbm_gb: 40.0,
            compute: ComputeRates::tflops(312.0, 312.0, 19.5),
            nic_gbps: 25.0,
            sms: A100_SMS,
            latency: A100_LATENCY,
        }),
        "dgx-h100" => Some(DgxGpu {
            nvswitch_gbps: 450.0,
            hbm_gbps: 3350.0,
            hbm_gb: 80.0,
            compute: ComputeRates::tflops(989.0, 989.0, 67.0),
            nic_gbps: 50.0,
            sms: H100_SMS,
            latency: H100_LATENCY,
        }),
        _ => None,
    }
}

/// The name of `nodes` nodes of `family`: the family's own name for one node.
fn dgx_name(family: &str, nodes: usize) -> String {
    if nodes == 1 { family.to_string() } else { format!("{family}x{nodes}") }
}

/// `nodes` DGX nodes of `gpu`, named `name`. One node has no NICs (nothing leaves it).
fn dgx(name: String, gpu: &DgxGpu, nodes: usize) -> Result<Topology, TopologyError> {
    let site = Site::new(gpu.hbm_gbps, gpu.hbm_gb, gpu.compute).with_endpoint_caps(gpu.nvswitch_gbps).with_sms(gpu.sms);
    let topology = if nodes == 1 {
        Topology::new(name, vec![site; GPUS_PER_NODE], vec![], Some(Fallback::Switch))
    } else {
        let site = site.with_nic(gpu.nic_gbps);
        let layout = Nodes::blocks(nodes, GPUS_PER_NODE, Fabric::NonBlocking);
        Topology::with_nodes(name, vec![site; nodes * GPUS_PER_NODE], vec![], Some(Fallback::Switch), Some(layout))
    };
    Ok(topology?.with_latency(gpu.latency)?.with_service(LinkService::Fifo))
}

/// `name` as `FAMILYxN` with a DGX family and a decimal `N`: the family and `N`.
fn parse_node_preset(name: &str) -> Option<(&str, &str)> {
    let (family, count) = name.rsplit_once('x')?;
    (dgx_gpu(family).is_some() && !count.is_empty() && count.bytes().all(|b| b.is_ascii_digit()))
        .then_some((family, count))
}

fn dgx_v100() -> Topology {
    let site = Site::new(900.0, 32.0, ComputeRates::tflops(125.0, 15.7, 15.7)).with_sms(V100_SMS);
    let links = V100_DOUBLE_LINKS
        .iter()
        .map(|&(a, b)| Link::gbps(a, b, 50.0))
        .chain(V100_SINGLE_LINKS.iter().map(|&(a, b)| Link::gbps(a, b, 25.0)))
        .collect();
    let bridge = Fallback::Shared { name: PCIE_BRIDGE.to_string(), bandwidth: 15.75 * GB };
    Topology::new("dgx-v100", vec![site; 8], links, Some(bridge))
        .and_then(|t| t.with_latency(V100_LATENCY))
        .expect("the dgx-v100 preset is valid")
        .with_service(LinkService::Fifo)
}

fn nvl72() -> Topology {
    let site = Site::new(8000.0, 192.0, ComputeRates::tflops(2500.0, 2500.0, 80.0))
        .with_endpoint_caps(900.0)
        .with_sms(B200_SMS);
    Topology::new("nvl72", vec![site; 72], vec![], Some(Fallback::Switch))
        .and_then(|t| t.with_latency(NVL72_LATENCY))
        .expect("the nvl72 preset is valid")
        .with_service(LinkService::Fifo)
}

fn h200() -> Topology {
    let site =
        Site::new(4800.0, 141.0, ComputeRates::tflops(989.0, 989.0, 67.0)).with_endpoint_caps(450.0).with_sms(H100_SMS);
    Topology::new("h200", vec![site], vec![], Some(Fallback::Switch))
        .and_then(|t| t.with_latency(H100_LATENCY))
        .expect("the h200 preset is valid")
        .with_service(LinkService::Fifo)
}

/// The name of the smallest machine of `base`'s family with at least `devices` sites, when
/// `base` is a DGX preset that scales by nodes (`dgx-a100`, `dgx-h100`, or one of their
/// `xN` forms): `dgx-a100` for up to 8 devices, `dgx-a100x2` for 9 to 16, and so on. `None`
/// for any other name (a fixed machine or a file), and when the machine would exceed
/// [`MAX_SITES`].
pub fn scaled_preset(base: &str, devices: usize) -> Option<String> {
    let family = parse_node_preset(base).map_or(base, |(family, _)| family);
    dgx_gpu(family)?;
    let nodes = devices.div_ceil(GPUS_PER_NODE).max(1);
    (nodes * GPUS_PER_NODE <= MAX_SITES).then(|| dgx_name(family, nodes))
}

impl Topology {
    /// The preset called `name`: one of [`PRESETS`], or a form of [`NODE_PRESETS`] with a
    /// number of nodes from 1 (`dgx-h100x4`). An unknown name is an error that lists the
    /// presets and forms; a number of nodes of 0, or too many for [`MAX_SITES`], says so.
    pub fn preset(name: &str) -> Result<Topology, TopologyError> {
        if let Some((family, count)) = parse_node_preset(name) {
            let gpu = dgx_gpu(family).expect("parse_node_preset checks the family");
            let most = MAX_SITES / GPUS_PER_NODE;
            let bad = |reason: String| TopologyError::PresetSize { name: name.to_string(), reason };
            let nodes: usize = count.parse().map_err(|_| bad(format!("at most {most} nodes are supported")))?;
            if nodes == 0 {
                return Err(bad("a machine needs at least one node".into()));
            }
            if nodes > most {
                return Err(bad(format!(
                    "{nodes} nodes of {GPUS_PER_NODE} GPUs exceed the {MAX_SITES} sites supported (at most {most} nodes)"
                )));
            }
            return dgx(dgx_name(family, nodes), &gpu, nodes);
        }
        match name {
            "dgx-v100" => Ok(dgx_v100()),
            "nvl72" => Ok(nvl72()),
            "h200" => Ok(h200()),
            _ => match dgx_gpu(name) {
                Some(gpu) => dgx(name.to_string(), &gpu, 1),
                None => Err(TopologyError::UnknownPreset { name: name.to_string(), known: preset_forms() }),
            },
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
        for form in NODE_PRESETS {
            let name = form.replace('N', "3");
            assert_eq!(Topology::preset(&name).expect("preset").name(), name);
        }
        let err = Topology::preset("dgx-b200").unwrap_err().to_string();
        assert!(err.contains("dgx-b200") && err.contains("dgx-a100, dgx-h100, dgx-v100, nvl72, h200"), "{err}");
        assert!(err.contains("dgx-a100xN, dgx-h100xN (N nodes of 8 GPUs)"), "{err}");
        for bad in ["dgx-a100x", "dgx-a100x-2", "dgx-a100x2.5", "dgx-v100x2", "nvl72x2", "dgx-a100X2"] {
            assert!(
                matches!(Topology::preset(bad), Err(TopologyError::UnknownPreset { .. })),
                "{bad}: {:?}",
                Topology::preset(bad)
            );
        }
    }

    #[test]
    fn node_counts_out_of_range_are_refused_with_the_reason() {
        let zero = Topology::preset("dgx-h100x0").unwrap_err().to_string();
        assert_eq!(zero, "topology preset `dgx-h100x0`: a machine needs at least one node");
        let big = Topology::preset("dgx-a100x129").unwrap_err().to_string();
        assert!(big.contains("1024 sites") && big.contains("at most 128 nodes"), "{big}");
        let huge = Topology::preset("dgx-a100x99999999999999999999999").unwrap_err().to_string();
        assert!(huge.contains("at most 128 nodes"), "{huge}");
        assert_eq!(Topology::preset("dgx-a100x128").expect("the largest").num_sites(), 1024);
    }

    #[test]
    fn one_node_is_the_single_node_preset() {
        assert_eq!(Topology::preset("dgx-a100x1"), Topology::preset("dgx-a100"));
        assert_eq!(Topology::preset("dgx-h100x1"), Topology::preset("dgx-h100"));
        assert_eq!(Topology::preset("dgx-a100x01"), Topology::preset("dgx-a100"));
    }

    #[test]
    fn two_nodes_are_sixteen_sites_in_two_blocks_of_eight() {
        let t = Topology::preset("dgx-a100x2").expect("preset");
        assert_eq!((t.name(), t.num_sites(), t.num_nodes()), ("dgx-a100x2", 16, 2));
        let nodes: Vec<_> = (0..16).map(|s| t.node(SiteId(s)).expect("in range")).collect();
        assert_eq!(nodes, [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]);
        assert_eq!(t.nodes().map(|n| n.fabric()), Some(&Fabric::NonBlocking));
        // Every GPU: 200 Gb/s HDR = 25 GB/s; H100: 400 Gb/s NDR = 50 GB/s.
        assert!(t.sites().iter().all(|s| s.nic == Some(200.0 / 8.0 * GB)));
        let h = Topology::preset("dgx-h100x4").expect("preset");
        assert_eq!((h.num_sites(), h.num_nodes()), (32, 4));
        assert!(h.sites().iter().all(|s| s.nic == Some(400.0 / 8.0 * GB) && s.egress == Some(450.0 * GB)));
    }

    #[test]
    fn scaling_picks_the_fewest_nodes_that_hold_the_devices() {
        assert_eq!(scaled_preset("dgx-a100", 1).as_deref(), Some("dgx-a100"));
        assert_eq!(scaled_preset("dgx-a100", 8).as_deref(), Some("dgx-a100"));
        assert_eq!(scaled_preset("dgx-a100", 9).as_deref(), Some("dgx-a100x2"));
        assert_eq!(scaled_preset("dgx-a100", 16).as_deref(), Some("dgx-a100x2"));
        assert_eq!(scaled_preset("dgx-h100x4", 17).as_deref(), Some("dgx-h100x3"));
        assert_eq!(scaled_preset("dgx-a100", 1024).as_deref(), Some("dgx-a100x128"));
        assert_eq!(scaled_preset("dgx-a100", 1025), None);
        assert_eq!(scaled_preset("dgx-v100", 16), None);
        assert_eq!(scaled_preset("nvl72", 100), None);
        assert_eq!(scaled_preset("my-box.json", 16), None);
    }

    #[test]
    fn nvl72_is_one_switch_domain_of_72_blackwell_gpus() {
        let t = Topology::preset("nvl72").expect("preset");
        assert_eq!((t.num_sites(), t.num_nodes()), (72, 1));
        // 1.8 TB/s bidirectional NVLink 5 per GPU: 900 GB/s each way, between any two GPUs.
        assert_eq!(t.route_bandwidth(SiteId(0), SiteId(71)), Some(1.8e12 / 2.0));
        let gpu = t.sites()[40];
        assert_eq!((gpu.hbm_capacity, gpu.hbm_bandwidth), (192.0 * GB, 8.0e12));
        // 10 PFLOPS bf16 with sparsity per two-GPU superchip: 2.5 PFLOPS dense per GPU.
        assert_eq!(gpu.compute.bf16, 10.0e15 / 2.0 / 2.0);
        assert_eq!(gpu.compute.f32, 160.0e12 / 2.0);
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

    #[test]
    fn node_presets_route_inside_over_nvswitch_and_between_over_nics() {
        let t = Topology::preset("dgx-h100x2").expect("preset");
        let names = |a, b| {
            t.route(SiteId(a), SiteId(b)).unwrap().iter().map(|r| t.resource(*r).unwrap().name()).collect::<Vec<_>>()
        };
        assert_eq!(names(9, 14), ["egress[9]", "ingress[14]"]);
        assert_eq!(names(3, 11), ["nic-out[3]", "nic-in[11]"]);
        assert_eq!(names(11, 3), ["nic-out[11]", "nic-in[3]"]);
        assert_eq!(t.route_bandwidth(SiteId(9), SiteId(14)), Some(450.0 * GB));
        assert_eq!(t.route_bandwidth(SiteId(3), SiteId(11)), Some(50.0 * GB));
    }
}
