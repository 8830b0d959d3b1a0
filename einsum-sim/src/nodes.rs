//! Machines of several nodes (servers): which node each site is in, and the fabric that joins
//! the nodes.
//!
//! Inside a node, sites talk as a single-node topology says (links, an NVSwitch's endpoint
//! caps, a shared bus). Between nodes, a transfer goes from the sending GPU straight to its
//! own NIC and from the receiving NIC straight into the receiving GPU (GPUDirect RDMA, over
//! each GPU's PCIe switch), so it crosses neither node's NVLink: its route is the sender's
//! NIC egress, the fabric if the fabric is shared, and the receiver's NIC ingress. Each site's
//! NIC is [`crate::Site::nic`]; the PCIe hop between a GPU and its NIC is taken to be faster
//! than the NIC (PCIe 4.0 x16 is about 32 GB/s each way against a 25 GB/s HDR port; PCIe 5.0
//! x16 about 64 GB/s against a 50 GB/s NDR port), so it is not a resource of its own.

/// What joins the NICs of different nodes.
#[derive(Debug, Clone, PartialEq)]
pub enum Fabric {
    /// A non-blocking fabric (a full-bisection fat tree, as NVIDIA's DGX SuperPOD reference
    /// designs build): only the two NICs limit a transfer between nodes.
    NonBlocking,
    /// One resource shared by every transfer between nodes, crossed between the two NICs: an
    /// oversubscribed fabric taken as a whole.
    Shared {
        /// The resource's name.
        name: String,
        /// Its total bytes/s.
        bandwidth: f64,
    },
}

/// Which node each site is in, and the fabric between the nodes. Nodes are numbered from 0
/// without gaps; [`crate::Topology::with_nodes`] checks that against the sites.
#[derive(Debug, Clone, PartialEq)]
pub struct Nodes {
    node_of: Vec<usize>,
    count: usize,
    fabric: Fabric,
}

impl Nodes {
    /// `count` nodes of `per_node` consecutive sites each: site `s` is in node
    /// `s / per_node`.
    pub fn blocks(count: usize, per_node: usize, fabric: Fabric) -> Nodes {
        Nodes { node_of: (0..count * per_node).map(|s| s / per_node.max(1)).collect(), count, fabric }
    }

    /// Site `i` in node `node_of[i]`.
    pub fn new(node_of: Vec<usize>, fabric: Fabric) -> Nodes {
        let count = node_of.iter().max().map_or(0, |m| m + 1);
        Nodes { node_of, count, fabric }
    }

    /// The node of each site, indexed by site.
    pub fn node_of(&self) -> &[usize] {
        &self.node_of
    }

    /// How many nodes (one more than the largest node number).
    pub fn count(&self) -> usize {
        self.count
    }

    /// What joins the nodes.
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// The number of sites per node when the nodes are equal blocks of consecutive sites (as
    /// [`Nodes::blocks`] makes them), else `None`.
    pub fn block_size(&self) -> Option<usize> {
        let n = self.node_of.len();
        if self.count == 0 || !n.is_multiple_of(self.count) {
            return None;
        }
        let per_node = n / self.count;
        self.node_of.iter().enumerate().all(|(s, &k)| k == s / per_node).then_some(per_node)
    }

    /// How many sites each node holds, indexed by node.
    pub fn sizes(&self) -> Vec<usize> {
        let mut sizes = vec![0; self.count];
        for &k in &self.node_of {
            sizes[k] += 1;
        }
        sizes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_number_consecutive_sites() {
        let n = Nodes::blocks(3, 2, Fabric::NonBlocking);
        assert_eq!(n.node_of(), [0, 0, 1, 1, 2, 2]);
        assert_eq!((n.count(), n.block_size(), n.sizes()), (3, Some(2), vec![2, 2, 2]));
        assert_eq!(n, Nodes::new(vec![0, 0, 1, 1, 2, 2], Fabric::NonBlocking));
    }

    #[test]
    fn interleaved_or_uneven_nodes_are_not_blocks() {
        let interleaved = Nodes::new(vec![0, 1, 0, 1], Fabric::NonBlocking);
        assert_eq!((interleaved.count(), interleaved.block_size()), (2, None));
        let uneven = Nodes::new(vec![0, 0, 0, 1], Fabric::NonBlocking);
        assert_eq!((uneven.block_size(), uneven.sizes()), (None, vec![3, 1]));
        let gap = Nodes::new(vec![0, 2], Fabric::NonBlocking);
        assert_eq!(gap.sizes(), vec![1, 0, 1]);
    }
}
