//! Multi-operand einsum orders: an einsum of three or more operands (`ij,jk,kl->il`) is
//! contracted by its kernel pairwise, left to right ([`Einsum`](einsum_ops::einsum::Einsum)),
//! so an einsum whose operands are written in a costly order stays costly. Where every
//! letter binds one index name (as for two operands), such an einsum is a contraction network
//! node whose written association is left to right: the network's forms (any order of its
//! operands, under the rule's own e-graph rules) are weighed like a chain's, and a form other
//! than the written one is rebuilt as two-operand einsums. An index summed over three or more
//! operands is no pairwise contraction: such an einsum is left as written.

use einsum_rewrite::{Rule, rules};

/// The rule that treats multi-operand einsums as contraction networks.
#[derive(Clone, Debug)]
pub struct Order {
    /// Its name in reports ([`Change::rule`](super::Change) of a network with such an einsum).
    pub name: String,
    /// The e-graph rules of a network with a multi-operand einsum: association and
    /// commutation by default, since an einsum's operands may be written in any order (the
    /// cheap pairing need not be a run of the written order).
    pub rules: Vec<Rule>,
    /// The most tensors of a network that [`Order::rules`] saturate; a larger network has the
    /// contraction rules of [`Rules::contraction`](super::Rules) (commutation adds every subset
    /// of the tensors).
    pub max_leaves: usize,
}

impl Order {
    /// Multi-operand einsums weighed in every pairing order (association and commutation) up
    /// to 8 tensors per network.
    pub fn multi_operand() -> Self {
        Order { name: "order".into(), rules: rules::contraction_rules(), max_leaves: 8 }
    }
}

impl Default for Order {
    fn default() -> Self {
        Order::multi_operand()
    }
}
