//! Unit tests of `Topology`: routes, injection bandwidths, nodes and the
//! checks of a built machine, in a file of their own so that `topology.rs` holds the type
//! alone.

use super::*;
use crate::nodes::Fabric;

fn site() -> Site {
    Site::new(100.0, 10.0, ComputeRates::tflops(1.0, 1.0, 1.0))
}

#[test]
fn routes_cross_endpoint_caps_and_links() {
    let sites = vec![site().with_endpoint_caps(10.0), site(), site().with_endpoint_caps(5.0)];
    let links = vec![Link::gbps(0, 1, 20.0)];
    let t =
        Topology::new("t", sites, links, Some(Fallback::Shared { name: "bus".into(), bandwidth: GB })).expect("valid");
    let names = |a, b| {
        t.route(SiteId(a), SiteId(b)).unwrap().iter().map(|r| t.resource(*r).unwrap().name()).collect::<Vec<_>>()
    };
    assert_eq!(names(0, 1), ["egress[0]", "link 0->1"]);
    assert_eq!(names(1, 0), ["link 1->0", "ingress[0]"]);
    assert_eq!(names(0, 2), ["egress[0]", "bus", "ingress[2]"]);
    assert_eq!(names(1, 2), ["bus", "ingress[2]"]);
    assert_eq!(t.route_bandwidth(SiteId(0), SiteId(1)), Some(10.0 * GB));
    assert_eq!(t.route_bandwidth(SiteId(1), SiteId(2)), Some(GB));
    assert_eq!(t.route(SiteId(1), SiteId(1)), None);
    assert_eq!(t.route(SiteId(1), SiteId(3)), None);
    assert_eq!(t.find_resource("bus"), t.shared_resource());
}

#[test]
fn bad_descriptions_name_the_field() {
    let err = |sites: Vec<Site>, links: Vec<Link>, fb: Option<Fallback>| {
        Topology::new("t", sites, links, fb).unwrap_err().to_string()
    };
    let two = || vec![site(), site()];
    assert!(err(vec![], vec![], None).starts_with("sites: "));
    let mut bad = site();
    bad.hbm_bandwidth = -1.0;
    assert!(err(vec![site(), bad], vec![], Some(Fallback::Switch)).starts_with("sites[1].hbm_gbps: "));
    assert!(err(two(), vec![Link::gbps(0, 2, 1.0)], None).starts_with("links[0].b: "));
    assert!(err(two(), vec![Link::gbps(0, 0, 1.0)], None).starts_with("links[0].b: "));
    assert!(err(two(), vec![Link::gbps(0, 1, 0.0)], None).starts_with("links[0].gbps: "));
    let dup = vec![Link::gbps(0, 1, 1.0), Link::gbps(1, 0, 1.0)];
    assert!(err(two(), dup, None).starts_with("links[1]: "));
    assert_eq!(
        Topology::new("t", two(), vec![], None),
        Err(TopologyError::Unroutable { src: SiteId(0), dst: SiteId(1) })
    );
    assert!(err(two(), vec![], Some(Fallback::Switch)).starts_with("fallback: "));
    let nan = Fallback::Shared { name: "x".into(), bandwidth: f64::NAN };
    assert!(err(two(), vec![], Some(nan)).starts_with("fallback.gbps: "));
}

/// The typical rule counts a V100's six 25 GB/s NVLink lanes; the bound adds the PCIe
/// bridge shared by all eight (it reaches the sites it is not linked to); an NVSwitch
/// port is its egress cap under both.
#[test]
fn injection_bandwidth_typical_and_bound() {
    let v100 = Topology::preset("dgx-v100").unwrap();
    let (typical, bound) = (v100.injection_bandwidth(SiteId(0)).unwrap(), v100.max_injection_bandwidth(SiteId(0)));
    assert!((typical - 150.0 * GB).abs() < 1.0, "{typical}");
    assert_eq!(bound, Some(165.75 * GB));
    let a100 = Topology::preset("dgx-a100").unwrap();
    assert_eq!(a100.injection_bandwidth(SiteId(3)), Some(300.0 * GB));
    assert_eq!(a100.max_injection_bandwidth(SiteId(3)), Some(300.0 * GB));
    assert_eq!(a100.injection_bandwidth(SiteId(8)), None);
    // Only a shared fallback: each site typically gets the bus's route bandwidth.
    let bus = Topology::new(
        "bus",
        vec![site(), site()],
        vec![],
        Some(Fallback::Shared { name: "bus".into(), bandwidth: 4.0 * GB }),
    )
    .unwrap();
    assert_eq!(bus.injection_bandwidth(SiteId(0)), Some(4.0 * GB));
    assert_eq!(bus.max_injection_bandwidth(SiteId(0)), Some(4.0 * GB));
}

/// Two nodes of two sites: an NVSwitch-like node 0, and a node 1 of two linked sites
/// with a shared bus that nothing uses.
fn two_nodes(fabric: Fabric) -> Result<Topology, TopologyError> {
    let switched = site().with_endpoint_caps(10.0).with_nic(2.0);
    let plain = site().with_nic(3.0);
    Topology::with_nodes(
        "two",
        vec![switched, switched, plain, plain],
        vec![Link::gbps(2, 3, 7.0)],
        Some(Fallback::Shared { name: "bus".into(), bandwidth: GB }),
        Some(Nodes::blocks(2, 2, fabric)),
    )
}

#[test]
fn routes_between_nodes_cross_only_the_nics_and_a_shared_fabric() {
    let t = two_nodes(Fabric::NonBlocking).expect("valid");
    let names = |t: &Topology, a, b| {
        t.route(SiteId(a), SiteId(b)).unwrap().iter().map(|r| t.resource(*r).unwrap().name()).collect::<Vec<_>>()
    };
    assert_eq!(names(&t, 0, 1), ["egress[0]", "bus@node0", "ingress[1]"]);
    assert_eq!(names(&t, 2, 3), ["link 2->3"]);
    // The NVSwitch caps of sites 0 and 1 are not crossed on the way to another node.
    assert_eq!(names(&t, 0, 3), ["nic-out[0]", "nic-in[3]"]);
    assert_eq!(names(&t, 3, 1), ["nic-out[3]", "nic-in[1]"]);
    assert_eq!(t.route_bandwidth(SiteId(0), SiteId(3)), Some(2.0 * GB));
    assert_eq!((t.num_nodes(), t.node(SiteId(2)), t.node(SiteId(4))), (2, Some(1), None));
    assert_eq!(t.node_shared_resource(1), t.find_resource("bus@node1"));
    assert_eq!(t.shared_resource(), t.find_resource("bus@node0"));
    assert_eq!(t.fabric_resource(), None);
    let spine = two_nodes(Fabric::Shared { name: "spine".into(), bandwidth: 0.5 * GB }).expect("valid");
    assert_eq!(names(&spine, 1, 2), ["nic-out[1]", "spine", "nic-in[2]"]);
    assert_eq!(spine.route_bandwidth(SiteId(1), SiteId(2)), Some(0.5 * GB));
    assert_eq!(spine.fabric_resource(), spine.find_resource("spine"));
    // A single node is no nodes at all.
    let one = Topology::with_nodes("one", vec![site(); 2], vec![], Some(Fallback::Switch), None);
    let one_node = Nodes::blocks(1, 2, Fabric::NonBlocking);
    assert_eq!(
        Topology::with_nodes("one", vec![site(); 2], vec![], Some(Fallback::Switch), Some(one_node)).map(|t| t.nodes),
        one.map(|t| t.nodes)
    );
}

#[test]
fn bad_node_descriptions_name_the_field() {
    let err = |sites: Vec<Site>, links: Vec<Link>, nodes: Nodes| {
        Topology::with_nodes("t", sites, links, Some(Fallback::Switch), Some(nodes)).unwrap_err().to_string()
    };
    let nic = || site().with_endpoint_caps(1.0).with_nic(1.0);
    let e = err(vec![nic(); 3], vec![], Nodes::blocks(2, 2, Fabric::NonBlocking));
    assert_eq!(e, "nodes: gives the nodes of 4 sites, but the topology has 3");
    let e = err(vec![nic(); 3], vec![], Nodes::new(vec![0, 2, 2], Fabric::NonBlocking));
    assert!(e.starts_with("nodes: node 1 has no site"), "{e}");
    let e = err(vec![nic(), site().with_endpoint_caps(1.0)], vec![], Nodes::new(vec![0, 1], Fabric::NonBlocking));
    assert!(e.starts_with("sites[1].nic_gbps: missing"), "{e}");
    let e = err(vec![nic(); 2], vec![Link::gbps(0, 1, 1.0)], Nodes::new(vec![0, 1], Fabric::NonBlocking));
    assert!(e.starts_with("links[0]: sites 0 and 1 are in different nodes (0 and 1)"), "{e}");
    let spine = Fabric::Shared { name: "spine".into(), bandwidth: -1.0 };
    assert!(err(vec![nic(); 2], vec![], Nodes::new(vec![0, 1], spine)).starts_with("fabric.gbps: "));
    let unnamed = Fabric::Shared { name: String::new(), bandwidth: 1.0 };
    assert!(err(vec![nic(); 2], vec![], Nodes::new(vec![0, 1], unnamed)).starts_with("fabric.shared: "));
    let e = Topology::new("t", vec![nic(); 2], vec![], Some(Fallback::Switch)).unwrap_err().to_string();
    assert!(e.starts_with("sites[0].nic_gbps: a NIC carries traffic between nodes"), "{e}");
    // Pairs inside a node still need a route; pairs of different nodes have their NICs.
    let e = Topology::with_nodes(
        "t",
        vec![site().with_nic(1.0); 3],
        vec![],
        None,
        Some(Nodes::new(vec![0, 0, 1], Fabric::NonBlocking)),
    );
    assert_eq!(e, Err(TopologyError::Unroutable { src: SiteId(0), dst: SiteId(1) }));
    let e = Topology::with_nodes(
        "t",
        vec![site().with_nic(1.0); 2],
        vec![],
        None,
        Some(Nodes::new(vec![0, 1], Fabric::NonBlocking)),
    );
    assert!(e.is_ok(), "{e:?}");
}

/// Typical: a uniform all-to-all drains 1/3 of a site's bytes inside its node and 2/3
/// through its NIC at once; the bound adds the NIC to what the site sends inside.
#[test]
fn injection_bandwidth_of_several_nodes() {
    let t = two_nodes(Fabric::NonBlocking).expect("valid");
    // Site 0: 1/3 at 10 GB/s (egress cap), 2/3 at 2 GB/s (NIC): the NIC's share is slower.
    let expected = 1.0 / f64::max((1.0 / 3.0) / (10.0 * GB), (2.0 / 3.0) / (2.0 * GB));
    assert_eq!(t.injection_bandwidth(SiteId(0)), Some(expected));
    assert_eq!(t.max_injection_bandwidth(SiteId(0)), Some(12.0 * GB));
    // Site 2: its link of 7 GB/s, a bus (only linked sites in its node), NIC 3 GB/s.
    assert_eq!(t.max_injection_bandwidth(SiteId(2)), Some(10.0 * GB));
    // A shared fabric of 4 GB/s split among 4 sites leaves each 1 GB/s.
    let spine = two_nodes(Fabric::Shared { name: "spine".into(), bandwidth: 4.0 * GB }).expect("valid");
    let expected = 1.0 / f64::max((1.0 / 3.0) / (10.0 * GB), (2.0 / 3.0) / GB);
    assert_eq!(spine.injection_bandwidth(SiteId(0)), Some(expected));
    // Nodes of one site each: all traffic leaves through the NIC.
    let singles = Topology::with_nodes(
        "singles",
        vec![site().with_nic(5.0); 3],
        vec![],
        None,
        Some(Nodes::new(vec![0, 1, 2], Fabric::NonBlocking)),
    )
    .expect("valid");
    assert_eq!(singles.injection_bandwidth(SiteId(1)), Some(5.0 * GB));
    assert_eq!(singles.max_injection_bandwidth(SiteId(1)), Some(5.0 * GB));
}

#[test]
fn single_site_needs_no_routes() {
    let t = Topology::new("one", vec![site()], vec![], None).expect("valid");
    assert_eq!(t.num_sites(), 1);
    assert_eq!(t.resources().len(), 1);
    assert_eq!(t.injection_bandwidth(SiteId(0)), None);
    assert_eq!(t.max_injection_bandwidth(SiteId(0)), Some(0.0));
    assert_eq!(t.injection_bandwidth(SiteId(1)), None);
}
