//! Machines as sites and capacity-limited resources, with a route for every ordered pair of
//! distinct sites.
//!
//! A [`Topology`] is built from a small description (its sites, its links and a fallback for
//! unlinked pairs), checked once, and from then on answers two questions: which resources a
//! transfer from `a` to `b` crosses ([`Topology::route`]), and what each resource can carry
//! ([`Topology::resources`]). The simulator needs nothing else.
//!
//! Resources are, in [`ResourceId`] order: each site's egress cap and ingress cap (where the
//! site has them), each site's HBM, both directions of each link, and the shared fallback
//! resource (where there is one; one per node on a machine of several nodes). A route
//! between two sites of one node is `[egress(a)?, link a→b | shared | nothing,
//! ingress(b)?]`.
//!
//! A machine of several nodes ([`Nodes`]) adds, after those, each site's NIC egress and NIC
//! ingress and, where the fabric is shared, the fabric. A route between sites of different
//! nodes is `[nic-out(a), fabric?, nic-in(b)]`: GPUDirect RDMA takes the bytes from the GPU
//! to its NIC over PCIe, not over the node's NVLink (see `nodes.rs`).
//!
//! A topology also carries its [`Latency`] figures (kernel launch, transfer setup per kind
//! of path; `latency.rs`), zero unless set with [`Topology::with_latency`], and each site
//! its number of streaming multiprocessors ([`Site::sms`]), which sets how small kernels
//! fill the device (`efficiency.rs`), and its [`LinkService`]: whether the transfers of one
//! ordered pair of sites share fairly or are served one at a time in issue order
//! (`service.rs`; fair unless set with [`Topology::with_service`]).

use std::collections::HashMap;
use std::fmt;

use crate::error::TopologyError;
use crate::latency::Latency;
use crate::nodes::{Fabric, Nodes};
use crate::service::LinkService;

/// Bytes in a gigabyte: sizes and bandwidths use decimal units, GB = 1e9 bytes.
pub const GB: f64 = 1e9;
/// FLOP in a teraFLOP.
pub const TFLOP: f64 = 1e12;
/// The most sites a topology may have (routes are checked for every ordered pair).
pub const MAX_SITES: usize = 1024;

/// A processor (one GPU) of a topology, numbered from 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteId(pub usize);

impl fmt::Display for SiteId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A capacity-limited resource of a topology, an index into [`Topology::resources`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceId(pub usize);

impl fmt::Display for ResourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

/// A floating-point format, for compute rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// IEEE single precision.
    F32,
}

/// Dense FLOP/s of one site per precision, for predicting kernel times of whole plans.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ComputeRates {
    /// f16 FLOP/s.
    pub f16: f64,
    /// bf16 FLOP/s.
    pub bf16: f64,
    /// f32 FLOP/s.
    pub f32: f64,
}

impl ComputeRates {
    /// Rates given in TFLOP/s.
    pub fn tflops(f16: f64, bf16: f64, f32: f64) -> Self {
        ComputeRates { f16: f16 * TFLOP, bf16: bf16 * TFLOP, f32: f32 * TFLOP }
    }

    /// FLOP/s at `precision`.
    pub fn rate(&self, precision: Precision) -> f64 {
        match precision {
            Precision::F16 => self.f16,
            Precision::BF16 => self.bf16,
            Precision::F32 => self.f32,
        }
    }
}

/// One site's memory, compute and (on switched machines) endpoint caps. Bandwidths in
/// bytes/s, capacities in bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Site {
    /// HBM bandwidth: local aggregations read and write through it, and share it.
    pub hbm_bandwidth: f64,
    /// HBM capacity in bytes.
    pub hbm_capacity: f64,
    /// Compute rates.
    pub compute: ComputeRates,
    /// Cap on everything the site sends (an NVSwitch port), if any.
    pub egress: Option<f64>,
    /// Cap on everything the site receives, if any.
    pub ingress: Option<f64>,
    /// Bytes/s of the site's own network interface in each direction, crossed by everything
    /// it sends to and receives from other nodes. Required on every site of a machine of
    /// several nodes, refused on a machine of one.
    pub nic: Option<f64>,
    /// Streaming multiprocessors: how many thread blocks of a kernel run at once, which
    /// sets how far a kernel of few output tiles falls short of the peak (wave quantization,
    /// see [`crate::Roofline::kernel_seconds`]). `None`: not modelled (every kernel fills
    /// the device).
    pub sms: Option<usize>,
}

impl Site {
    /// A site with HBM bandwidth in GB/s and capacity in GB, and no endpoint caps.
    pub fn new(hbm_gbps: f64, hbm_gb: f64, compute: ComputeRates) -> Self {
        Site {
            hbm_bandwidth: hbm_gbps * GB,
            hbm_capacity: hbm_gb * GB,
            compute,
            egress: None,
            ingress: None,
            nic: None,
            sms: None,
        }
    }

    /// The same site with egress and ingress both capped at `gbps` GB/s.
    pub fn with_endpoint_caps(mut self, gbps: f64) -> Self {
        self.egress = Some(gbps * GB);
        self.ingress = Some(gbps * GB);
        self
    }

    /// The same site with a NIC of `gbps` GB/s each way (for machines of several nodes).
    pub fn with_nic(mut self, gbps: f64) -> Self {
        self.nic = Some(gbps * GB);
        self
    }

    /// The same site with `sms` streaming multiprocessors.
    pub fn with_sms(mut self, sms: usize) -> Self {
        self.sms = Some(sms);
        self
    }
}

/// A point-to-point link between two sites; each direction has `bandwidth` bytes/s of its
/// own (two directed resources).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// One end.
    pub a: SiteId,
    /// The other end.
    pub b: SiteId,
    /// Bytes/s in each direction.
    pub bandwidth: f64,
}

impl Link {
    /// A link of `gbps` GB/s each way.
    pub fn gbps(a: usize, b: usize, gbps: f64) -> Self {
        Link { a: SiteId(a), b: SiteId(b), bandwidth: gbps * GB }
    }
}

/// What carries traffic between two sites that no link joins.
#[derive(Debug, Clone, PartialEq)]
pub enum Fallback {
    /// A non-blocking switch: the transfer crosses only the endpoint caps of its two sites
    /// (NVSwitch machines).
    Switch,
    /// One resource shared by every transfer between unlinked pairs (the DGX-V100's PCIe
    /// bridge).
    Shared {
        /// The resource's name.
        name: String,
        /// Its total bytes/s.
        bandwidth: f64,
    },
}

/// What a resource is.
#[derive(Debug, Clone, PartialEq)]
pub enum ResourceKind {
    /// Everything a site sends.
    Egress(SiteId),
    /// Everything a site receives.
    Ingress(SiteId),
    /// A site's HBM, crossed by its local aggregations.
    Hbm(SiteId),
    /// One direction of a link.
    Link {
        /// The sending end.
        from: SiteId,
        /// The receiving end.
        to: SiteId,
    },
    /// Everything a site sends to other nodes: its NIC's egress.
    NicEgress(SiteId),
    /// Everything a site receives from other nodes: its NIC's ingress.
    NicIngress(SiteId),
    /// A named resource shared by many routes.
    Shared(String),
}

/// A capacity-limited resource: flows crossing it share `capacity` bytes/s max-min fairly.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    /// What it is.
    pub kind: ResourceKind,
    /// Bytes/s.
    pub capacity: f64,
}

impl Resource {
    /// A short human name: `egress[0]`, `ingress[1]`, `hbm[2]`, `link 0->3`, `nic-out[4]`,
    /// `nic-in[5]`, or a shared resource's own name.
    pub fn name(&self) -> String {
        match &self.kind {
            ResourceKind::Egress(s) => format!("egress[{s}]"),
            ResourceKind::Ingress(s) => format!("ingress[{s}]"),
            ResourceKind::Hbm(s) => format!("hbm[{s}]"),
            ResourceKind::Link { from, to } => format!("link {from}->{to}"),
            ResourceKind::NicEgress(s) => format!("nic-out[{s}]"),
            ResourceKind::NicIngress(s) => format!("nic-in[{s}]"),
            ResourceKind::Shared(name) => name.clone(),
        }
    }
}

/// A machine: sites, links, a fallback for unlinked pairs of one node, the nodes (when
/// there are several) and the resources and routes derived from them. Built only through
/// [`Topology::new`] or [`Topology::with_nodes`] (or a preset or file), so every `Topology`
/// is valid: all capacities are positive and finite and every ordered pair of distinct sites
/// has a route that crosses at least one resource.
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    name: String,
    sites: Vec<Site>,
    links: Vec<Link>,
    fallback: Option<Fallback>,
    /// `None` on a machine of one node.
    nodes: Option<Nodes>,
    resources: Vec<Resource>,
    egress: Vec<Option<ResourceId>>,
    ingress: Vec<Option<ResourceId>>,
    hbm: Vec<ResourceId>,
    link_index: HashMap<(SiteId, SiteId), ResourceId>,
    /// The shared fallback resource of each node (one entry on a machine of one node).
    shared: Vec<ResourceId>,
    /// Each site's NIC egress and ingress; empty on a machine of one node.
    nic_out: Vec<ResourceId>,
    nic_in: Vec<ResourceId>,
    /// The shared fabric resource, if the fabric is shared.
    fabric: Option<ResourceId>,
    /// Kernel launch and transfer setup latencies ([`Latency::ZERO`] unless set).
    latency: Latency,
    /// How the transfers of one ordered pair of sites are served ([`LinkService::Fair`]
    /// unless set).
    service: LinkService,
}

fn check_positive(value: f64, path: impl FnOnce() -> String) -> Result<(), TopologyError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(TopologyError::field(path(), format!("expected a positive number, got {value}")))
    }
}

/// `nodes` checked against `n` sites: one node per site, numbered from 0 without gaps.
/// `None` when it is a single node (the same machine as no `nodes`).
fn check_nodes(nodes: Nodes, n: usize) -> Result<Option<Nodes>, TopologyError> {
    if nodes.node_of().len() != n {
        return Err(TopologyError::field(
            "nodes",
            format!("gives the nodes of {} sites, but the topology has {n}", nodes.node_of().len()),
        ));
    }
    if let Some(k) = nodes.sizes().iter().position(|&size| size == 0) {
        return Err(TopologyError::field(
            "nodes",
            format!("node {k} has no site (nodes are numbered from 0 without gaps)"),
        ));
    }
    Ok((nodes.count() > 1).then_some(nodes))
}

impl Topology {
    /// Checks the description of a machine of one node and derives its resources. Errors
    /// name the offending field as the JSON format spells it (`sites[2].hbm_gbps`,
    /// `links[3].b`, `fallback.gbps`), or the first unroutable pair.
    pub fn new(
        name: impl Into<String>,
        sites: Vec<Site>,
        links: Vec<Link>,
        fallback: Option<Fallback>,
    ) -> Result<Self, TopologyError> {
        Topology::with_nodes(name, sites, links, fallback, None)
    }

    /// [`Topology::new`] for a machine of several nodes: `fallback` and `links` describe
    /// traffic inside each node (a shared fallback is one resource per node, named
    /// `NAME@nodeK`), and traffic between nodes crosses the sites' NICs and `nodes`' fabric.
    /// Every site needs a [`Site::nic`] and no link may join two nodes. `nodes` of a single
    /// node is the same as `None`, and then no site may have a NIC. Errors name the field as
    /// the JSON format spells it (`nodes`, `sites[3].nic_gbps`, `fabric.gbps`).
    pub fn with_nodes(
        name: impl Into<String>,
        sites: Vec<Site>,
        links: Vec<Link>,
        fallback: Option<Fallback>,
        nodes: Option<Nodes>,
    ) -> Result<Self, TopologyError> {
        let n = sites.len();
        if n == 0 {
            return Err(TopologyError::field("sites", "expected at least one site"));
        }
        if n > MAX_SITES {
            return Err(TopologyError::field("sites", format!("at most {MAX_SITES} sites are supported, got {n}")));
        }
        let nodes = match nodes {
            Some(nodes) => check_nodes(nodes, n)?,
            None => None,
        };
        // Each site's NIC, on a machine of several nodes.
        let mut nics = Vec::new();
        for (i, site) in sites.iter().enumerate() {
            check_positive(site.hbm_bandwidth, || format!("sites[{i}].hbm_gbps"))?;
            check_positive(site.hbm_capacity, || format!("sites[{i}].hbm_gb"))?;
            check_positive(site.compute.f16, || format!("sites[{i}].tflops.f16"))?;
            check_positive(site.compute.bf16, || format!("sites[{i}].tflops.bf16"))?;
            check_positive(site.compute.f32, || format!("sites[{i}].tflops.f32"))?;
            if let Some(e) = site.egress {
                check_positive(e, || format!("sites[{i}].egress_gbps"))?;
            }
            if let Some(e) = site.ingress {
                check_positive(e, || format!("sites[{i}].ingress_gbps"))?;
            }
            if site.sms == Some(0) {
                return Err(TopologyError::field(format!("sites[{i}].sms"), "expected a positive count, got 0"));
            }
            match (site.nic, &nodes) {
                (Some(nic), Some(_)) => {
                    check_positive(nic, || format!("sites[{i}].nic_gbps"))?;
                    nics.push(nic);
                }
                (None, Some(_)) => {
                    return Err(TopologyError::field(
                        format!("sites[{i}].nic_gbps"),
                        "missing (every site of a machine of several nodes reaches the other nodes through its NIC)",
                    ));
                }
                (Some(_), None) => {
                    return Err(TopologyError::field(
                        format!("sites[{i}].nic_gbps"),
                        "a NIC carries traffic between nodes, and the topology has one node (give `nodes`)",
                    ));
                }
                (None, None) => {}
            }
        }

        let mut resources = Vec::new();
        let mut push = |kind, capacity| {
            resources.push(Resource { kind, capacity });
            ResourceId(resources.len() - 1)
        };
        let egress: Vec<_> =
            (0..n).map(|i| sites[i].egress.map(|c| push(ResourceKind::Egress(SiteId(i)), c))).collect();
        let ingress: Vec<_> =
            (0..n).map(|i| sites[i].ingress.map(|c| push(ResourceKind::Ingress(SiteId(i)), c))).collect();
        let hbm: Vec<_> = (0..n).map(|i| push(ResourceKind::Hbm(SiteId(i)), sites[i].hbm_bandwidth)).collect();

        let node_of = |s: SiteId| nodes.as_ref().map_or(0, |nodes| nodes.node_of()[s.0]);
        let mut link_index = HashMap::new();
        for (i, link) in links.iter().enumerate() {
            for (end, site) in [("a", link.a), ("b", link.b)] {
                if site.0 >= n {
                    return Err(TopologyError::field(
                        format!("links[{i}].{end}"),
                        format!("site {site} is out of range (the topology has {n} sites)"),
                    ));
                }
            }
            if link.a == link.b {
                return Err(TopologyError::field(
                    format!("links[{i}].b"),
                    format!("a link joins site {} to itself", link.a),
                ));
            }
            check_positive(link.bandwidth, || format!("links[{i}].gbps"))?;
            if link_index.contains_key(&(link.a, link.b)) {
                return Err(TopologyError::field(
                    format!("links[{i}]"),
                    format!("sites {} and {} are already linked by an earlier entry", link.a, link.b),
                ));
            }
            if node_of(link.a) != node_of(link.b) {
                return Err(TopologyError::field(
                    format!("links[{i}]"),
                    format!(
                        "sites {} and {} are in different nodes ({} and {}); nodes are joined by the fabric, not by \
                         links",
                        link.a,
                        link.b,
                        node_of(link.a),
                        node_of(link.b)
                    ),
                ));
            }
            let ab = push(ResourceKind::Link { from: link.a, to: link.b }, link.bandwidth);
            let ba = push(ResourceKind::Link { from: link.b, to: link.a }, link.bandwidth);
            link_index.insert((link.a, link.b), ab);
            link_index.insert((link.b, link.a), ba);
        }

        let shared = match &fallback {
            Some(Fallback::Shared { name, bandwidth }) => {
                if name.is_empty() {
                    return Err(TopologyError::field("fallback.shared", "expected a non-empty name"));
                }
                check_positive(*bandwidth, || "fallback.gbps".to_string())?;
                match &nodes {
                    None => vec![push(ResourceKind::Shared(name.clone()), *bandwidth)],
                    Some(nodes) => (0..nodes.count())
                        .map(|k| push(ResourceKind::Shared(format!("{name}@node{k}")), *bandwidth))
                        .collect(),
                }
            }
            _ => Vec::new(),
        };

        let (mut nic_out, mut nic_in, mut fabric) = (Vec::new(), Vec::new(), None);
        if let Some(nodes) = &nodes {
            nic_out = nics.iter().enumerate().map(|(i, &c)| push(ResourceKind::NicEgress(SiteId(i)), c)).collect();
            nic_in = nics.iter().enumerate().map(|(i, &c)| push(ResourceKind::NicIngress(SiteId(i)), c)).collect();
            if let Fabric::Shared { name, bandwidth } = nodes.fabric() {
                if name.is_empty() {
                    return Err(TopologyError::field("fabric.shared", "expected a non-empty name"));
                }
                check_positive(*bandwidth, || "fabric.gbps".to_string())?;
                fabric = Some(push(ResourceKind::Shared(name.clone()), *bandwidth));
            }
        }

        let topology = Topology {
            name: name.into(),
            sites,
            links,
            fallback,
            nodes,
            resources,
            egress,
            ingress,
            hbm,
            link_index,
            shared,
            nic_out,
            nic_in,
            fabric,
            latency: Latency::ZERO,
            service: LinkService::Fair,
        };
        topology.check_routes()?;
        Ok(topology)
    }

    /// The same machine with `latency` (see `latency.rs`); a negative or non-finite figure is
    /// an error naming its field (`latency.link_us`).
    pub fn with_latency(mut self, latency: Latency) -> Result<Self, TopologyError> {
        latency.validate()?;
        self.latency = latency;
        Ok(self)
    }

    /// The same machine with its transfers served by `service` (see `service.rs`).
    pub fn with_service(mut self, service: LinkService) -> Self {
        self.service = service;
        self
    }

    /// How the transfers of one ordered pair of sites are served.
    pub fn service(&self) -> LinkService {
        self.service
    }

    /// The same machine as the pure fluid and roofline model: no latencies and no SM counts
    /// (every kernel reaches its roofline at any size). The figures computed before
    /// latencies and wave quantization existed are this machine's under
    /// [`LinkService::Fair`]; the link service is kept (the paper's examples are the same
    /// under both, `service.rs`).
    pub fn fluid(&self) -> Topology {
        let mut t = self.clone();
        t.latency = Latency::ZERO;
        for site in &mut t.sites {
            site.sms = None;
        }
        t
    }

    /// The machine's kernel launch and transfer setup latencies.
    pub fn latency(&self) -> &Latency {
        &self.latency
    }

    /// Every ordered pair of one node must have a route, and every route must cross a
    /// resource (pairs of different nodes cross their NICs).
    fn check_routes(&self) -> Result<(), TopologyError> {
        let n = self.sites.len();
        for a in 0..n {
            for b in 0..n {
                let (a, b) = (SiteId(a), SiteId(b));
                if a == b || self.link_index.contains_key(&(a, b)) || self.node(a) != self.node(b) {
                    continue;
                }
                match self.fallback {
                    None => return Err(TopologyError::Unroutable { src: a, dst: b }),
                    Some(Fallback::Shared { .. }) => {}
                    Some(Fallback::Switch) => {
                        if self.egress[a.0].is_none() && self.ingress[b.0].is_none() {
                            return Err(TopologyError::field(
                                "fallback",
                                format!(
                                    "a switch limits nothing between sites {a} and {b}: give site {a} an egress_gbps \
                                     or site {b} an ingress_gbps"
                                ),
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The topology's name (a preset's name, or the file's `name` field).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many sites.
    pub fn num_sites(&self) -> usize {
        self.sites.len()
    }

    /// All sites, indexed by [`SiteId`].
    pub fn sites(&self) -> &[Site] {
        &self.sites
    }

    /// One site, or `None` when out of range.
    pub fn site(&self, site: SiteId) -> Option<&Site> {
        self.sites.get(site.0)
    }

    /// The links, in the order given.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// What carries traffic between unlinked pairs, if anything.
    pub fn fallback(&self) -> Option<&Fallback> {
        self.fallback.as_ref()
    }

    /// All resources, indexed by [`ResourceId`].
    pub fn resources(&self) -> &[Resource] {
        &self.resources
    }

    /// One resource, or `None` when out of range.
    pub fn resource(&self, id: ResourceId) -> Option<&Resource> {
        self.resources.get(id.0)
    }

    /// The first resource whose [`Resource::name`] is `name` (e.g. `"pcie-bridge"`,
    /// `"link 0->3"`, `"hbm[2]"`).
    pub fn find_resource(&self, name: &str) -> Option<ResourceId> {
        self.resources.iter().position(|r| r.name() == name).map(ResourceId)
    }

    /// The shared fallback resource, if the topology has one: on a machine of several nodes,
    /// node 0's (see [`Topology::node_shared_resource`]).
    pub fn shared_resource(&self) -> Option<ResourceId> {
        self.shared.first().copied()
    }

    /// The shared fallback resource of `node`, if the topology has one and the node exists.
    pub fn node_shared_resource(&self, node: usize) -> Option<ResourceId> {
        self.shared.get(node).copied()
    }

    /// The nodes, or `None` on a machine of one node.
    pub fn nodes(&self) -> Option<&Nodes> {
        self.nodes.as_ref()
    }

    /// How many nodes (1 on a machine of one node).
    pub fn num_nodes(&self) -> usize {
        self.nodes.as_ref().map_or(1, Nodes::count)
    }

    /// The node `site` is in (0 on a machine of one node), or `None` when out of range.
    pub fn node(&self, site: SiteId) -> Option<usize> {
        if site.0 >= self.sites.len() {
            return None;
        }
        Some(self.nodes.as_ref().map_or(0, |nodes| nodes.node_of()[site.0]))
    }

    /// A site's NIC egress and ingress resources, or `None` on a machine of one node or for
    /// a site out of range.
    pub fn nic(&self, site: SiteId) -> Option<(ResourceId, ResourceId)> {
        Some((*self.nic_out.get(site.0)?, *self.nic_in.get(site.0)?))
    }

    /// The shared fabric resource, if the machine has several nodes and a shared fabric.
    pub fn fabric_resource(&self) -> Option<ResourceId> {
        self.fabric
    }

    /// A site's HBM resource, or `None` when out of range.
    pub fn hbm(&self, site: SiteId) -> Option<ResourceId> {
        self.hbm.get(site.0).copied()
    }

    /// The resources a transfer from `src` to `dst` crosses, or `None` when either site is
    /// out of range or `src == dst`. Never empty otherwise. Between nodes: the sender's NIC
    /// egress, the fabric (if shared), the receiver's NIC ingress; inside a node: the
    /// sender's egress cap, the link or the node's shared fallback, the receiver's ingress
    /// cap (each where there is one).
    pub fn route(&self, src: SiteId, dst: SiteId) -> Option<Vec<ResourceId>> {
        let n = self.sites.len();
        if src == dst || src.0 >= n || dst.0 >= n {
            return None;
        }
        let mut route = Vec::with_capacity(3);
        let (from, to) = (self.node(src)?, self.node(dst)?);
        if from != to {
            route.push(self.nic_out[src.0]);
            route.extend(self.fabric);
            route.push(self.nic_in[dst.0]);
            return Some(route);
        }
        route.extend(self.egress[src.0]);
        if let Some(&link) = self.link_index.get(&(src, dst)) {
            route.push(link);
        } else {
            route.extend(self.shared.get(from));
        }
        route.extend(self.ingress[dst.0]);
        Some(route)
    }

    /// The bandwidth a transfer from `src` to `dst` gets when alone: the smallest capacity on
    /// its route. `None` as for [`Topology::route`].
    pub fn route_bandwidth(&self, src: SiteId, dst: SiteId) -> Option<f64> {
        let route = self.route(src, dst)?;
        route.iter().map(|r| self.resources[r.0].capacity).reduce(f64::min)
    }

    /// Whether a link joins `a` and `b` directly.
    pub fn linked(&self, a: SiteId, b: SiteId) -> bool {
        self.link_index.contains_key(&(a, b))
    }

    /// The bytes per second `site` typically sends when every device talks at once, for cost
    /// models. Inside a node: its egress cap where it has one, else the sum of its links,
    /// else (a site with neither, reached only through the fallback) its fastest route to
    /// another site of its node. `None` on a machine of one site, or for a site out of range.
    ///
    /// Unlike [`Topology::max_injection_bandwidth`] it does not add a shared fallback to a
    /// site's links: a shared bus is split among all the sites that use it, so counting it
    /// whole would overstate what each site gets.
    ///
    /// On a machine of several nodes it is the rate at which the site drains a uniform
    /// all-to-all: of its bytes, the share for its own node's other sites leaves at the
    /// in-node rate above and the share for other nodes through its NIC (a shared fabric
    /// split evenly among all sites), both at once, so the slower share sets the time. Two
    /// DGX-A100 nodes: 8/15 of the bytes at 25 GB/s, 7/15 at 300 GB/s, so about 46.9 GB/s.
    pub fn injection_bandwidth(&self, site: SiteId) -> Option<f64> {
        let node = self.node(site)?;
        let local = self.local_injection_bandwidth(site, node);
        let Some(nodes) = &self.nodes else { return local };
        let network = self.network_bandwidth(site)?;
        let (size, others) = (nodes.sizes()[node], (self.sites.len() - 1) as f64);
        let local_time = local.map_or(0.0, |b| (size - 1) as f64 / others / b);
        let network_time = (self.sites.len() - size) as f64 / others / network;
        Some(1.0 / local_time.max(network_time))
    }

    /// The bytes per second `site` can send to the other sites of its node, each direction
    /// (what [`Topology::injection_bandwidth`] mixes with the network's share): `None` for a
    /// site out of range or alone in its node.
    pub fn node_injection_bandwidth(&self, site: SiteId) -> Option<f64> {
        self.local_injection_bandwidth(site, self.node(site)?)
    }

    /// The bytes per second `site` can send to other nodes: its NIC, capped by an equal share
    /// of the fabric where the topology has one. `None` for a site out of range, without a
    /// NIC, or on a machine of one node.
    pub fn network_bandwidth(&self, site: SiteId) -> Option<f64> {
        self.nodes.as_ref()?;
        let nic = self.sites.get(site.0)?.nic?;
        Some(match self.fabric.and_then(|r| self.resource(r)) {
            Some(fabric) => nic.min(fabric.capacity / self.sites.len() as f64),
            None => nic,
        })
    }

    /// [`Topology::injection_bandwidth`] inside `site`'s node: `None` when the node has no
    /// other site.
    fn local_injection_bandwidth(&self, site: SiteId, node: usize) -> Option<f64> {
        let s = &self.sites[site.0];
        let links = self.link_bandwidth_sum(site);
        s.egress.or((links > 0.0).then_some(links)).or_else(|| {
            (0..self.num_sites())
                .filter(|&j| j != site.0 && self.node(SiteId(j)) == Some(node))
                .filter_map(|j| self.route_bandwidth(site, SiteId(j)))
                .reduce(f64::max)
        })
    }

    /// The most bytes per second `site` could send, for lower bounds on collectives: inside
    /// its node its egress cap where it has one, else the sum of its links plus, when some
    /// site of its node is not linked to it, the whole shared fallback (infinite when an
    /// unlinked site has no fallback to bound it); on a machine of several nodes, plus its
    /// NIC (traffic to other nodes leaves through it in parallel). `None` for a site out of
    /// range.
    pub fn max_injection_bandwidth(&self, site: SiteId) -> Option<f64> {
        let node = self.node(site)?;
        let s = &self.sites[site.0];
        let nic = s.nic.unwrap_or(0.0);
        if let Some(cap) = s.egress {
            return Some(cap + nic);
        }
        let unlinked = (0..self.num_sites())
            .any(|j| j != site.0 && self.node(SiteId(j)) == Some(node) && !self.linked(site, SiteId(j)));
        let fallback = match (unlinked, self.shared.get(node).and_then(|&r| self.resource(r))) {
            (true, Some(r)) => r.capacity,
            (true, None) => f64::INFINITY,
            (false, _) => 0.0,
        };
        Some(self.link_bandwidth_sum(site) + fallback + nic)
    }

    /// The summed bandwidth, one direction, of the links that touch `site`.
    fn link_bandwidth_sum(&self, site: SiteId) -> f64 {
        self.links.iter().filter(|l| l.a == site || l.b == site).map(|l| l.bandwidth).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> Site {
        Site::new(100.0, 10.0, ComputeRates::tflops(1.0, 1.0, 1.0))
    }

    #[test]
    fn routes_cross_endpoint_caps_and_links() {
        let sites = vec![site().with_endpoint_caps(10.0), site(), site().with_endpoint_caps(5.0)];
        let links = vec![Link::gbps(0, 1, 20.0)];
        let t = Topology::new("t", sites, links, Some(Fallback::Shared { name: "bus".into(), bandwidth: GB }))
            .expect("valid");
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
            Topology::with_nodes("one", vec![site(); 2], vec![], Some(Fallback::Switch), Some(one_node))
                .map(|t| t.nodes),
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
}
