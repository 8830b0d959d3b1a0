//! Building a [`Topology`](super::Topology) from its description: the checks of every figure, each error
//! naming the field as the JSON format spells it, and the resources derived from the sites,
//! links, fallback and nodes, numbered in the order the module docs of `topology.rs` give.
//! Apart from the type so that `topology.rs` holds what a built machine answers.

use std::collections::HashMap;

use super::{Fallback, Link, Resource, ResourceId, ResourceKind, Site, SiteId};
use crate::error::TopologyError;
use crate::nodes::{Fabric, Nodes};

pub(super) fn check_positive(value: f64, path: impl FnOnce() -> String) -> Result<(), TopologyError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(TopologyError::field(path(), format!("expected a positive number, got {value}")))
    }
}

/// `nodes` checked against `n` sites: one node per site, numbered from 0 without gaps.
/// `None` when it is a single node (the same machine as no `nodes`).
pub(super) fn check_nodes(nodes: Nodes, n: usize) -> Result<Option<Nodes>, TopologyError> {
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

/// Checks every site's figures, naming the field (`sites[2].hbm_gbps`), and returns each
/// site's NIC bandwidth on a machine of several nodes (`nodes`), where every site needs one
/// and none may have one otherwise.
pub(super) fn check_sites(sites: &[Site], nodes: Option<&Nodes>) -> Result<Vec<f64>, TopologyError> {
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
        match (site.nic, nodes) {
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
    Ok(nics)
}

/// Each site's NIC egress and ingress resources, and the shared fabric's.
type Network = (Vec<ResourceId>, Vec<ResourceId>, Option<ResourceId>);

/// The resources of a machine as [`Topology::with_nodes`](super::Topology::with_nodes) derives them, numbered in the
/// order they are pushed: the sites' endpoint caps and HBM, then the links, the shared
/// fallback, and the NICs and fabric.
#[derive(Default)]
pub(super) struct Resources(pub(super) Vec<Resource>);

impl Resources {
    /// Adds a resource and returns its id.
    pub(super) fn push(&mut self, kind: ResourceKind, capacity: f64) -> ResourceId {
        self.0.push(Resource { kind, capacity });
        ResourceId(self.0.len() - 1)
    }

    /// Checks the links against `n` sites and the nodes, naming the entry (`links[3].b`),
    /// and adds both directions of each: the index from an ordered pair of sites to its
    /// direction.
    pub(super) fn links(
        &mut self,
        links: &[Link],
        n: usize,
        nodes: Option<&Nodes>,
    ) -> Result<HashMap<(SiteId, SiteId), ResourceId>, TopologyError> {
        let node_of = |s: SiteId| nodes.map_or(0, |nodes| nodes.node_of()[s.0]);
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
            let ab = self.push(ResourceKind::Link { from: link.a, to: link.b }, link.bandwidth);
            let ba = self.push(ResourceKind::Link { from: link.b, to: link.a }, link.bandwidth);
            link_index.insert((link.a, link.b), ab);
            link_index.insert((link.b, link.a), ba);
        }
        Ok(link_index)
    }

    /// The shared fallback, checked (`fallback.gbps`): one resource per node, none without
    /// a shared fallback.
    pub(super) fn shared(
        &mut self,
        fallback: Option<&Fallback>,
        nodes: Option<&Nodes>,
    ) -> Result<Vec<ResourceId>, TopologyError> {
        Ok(match fallback {
            Some(Fallback::Shared { name, bandwidth }) => {
                if name.is_empty() {
                    return Err(TopologyError::field("fallback.shared", "expected a non-empty name"));
                }
                check_positive(*bandwidth, || "fallback.gbps".to_string())?;
                match nodes {
                    None => vec![self.push(ResourceKind::Shared(name.clone()), *bandwidth)],
                    Some(nodes) => (0..nodes.count())
                        .map(|k| self.push(ResourceKind::Shared(format!("{name}@node{k}")), *bandwidth))
                        .collect(),
                }
            }
            _ => Vec::new(),
        })
    }

    /// On a machine of several nodes, each site's NIC egress and ingress and the fabric,
    /// when shared (checked: `fabric.gbps`); nothing on a machine of one node.
    pub(super) fn network(&mut self, nics: &[f64], nodes: Option<&Nodes>) -> Result<Network, TopologyError> {
        let (mut nic_out, mut nic_in, mut fabric) = (Vec::new(), Vec::new(), None);
        if let Some(nodes) = nodes {
            nic_out = nics.iter().enumerate().map(|(i, &c)| self.push(ResourceKind::NicEgress(SiteId(i)), c)).collect();
            nic_in = nics.iter().enumerate().map(|(i, &c)| self.push(ResourceKind::NicIngress(SiteId(i)), c)).collect();
            if let Fabric::Shared { name, bandwidth } = nodes.fabric() {
                if name.is_empty() {
                    return Err(TopologyError::field("fabric.shared", "expected a non-empty name"));
                }
                check_positive(*bandwidth, || "fabric.gbps".to_string())?;
                fabric = Some(self.push(ResourceKind::Shared(name.clone()), *bandwidth));
            }
        }
        Ok((nic_out, nic_in, fabric))
    }
}
