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
use crate::nodes::Nodes;
use crate::service::LinkService;

mod build;

use build::{Resources, check_nodes, check_sites};

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
        let nics = check_sites(&sites, nodes.as_ref())?;

        let mut resources = Resources::default();
        let egress: Vec<_> =
            (0..n).map(|i| sites[i].egress.map(|c| resources.push(ResourceKind::Egress(SiteId(i)), c))).collect();
        let ingress: Vec<_> =
            (0..n).map(|i| sites[i].ingress.map(|c| resources.push(ResourceKind::Ingress(SiteId(i)), c))).collect();
        let hbm: Vec<_> =
            (0..n).map(|i| resources.push(ResourceKind::Hbm(SiteId(i)), sites[i].hbm_bandwidth)).collect();
        let link_index = resources.links(&links, n, nodes.as_ref())?;
        let shared = resources.shared(fallback.as_ref(), nodes.as_ref())?;
        let (nic_out, nic_in, fabric) = resources.network(&nics, nodes.as_ref())?;
        let resources = resources.0;

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
mod tests;
