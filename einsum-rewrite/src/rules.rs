//! The rewrites of contraction networks, as values: a caller passes the rules it wants to
//! the saturation ([`crate::forms`]), and may add its own.

use egg::{Rewrite, rewrite};

use crate::{Contraction, Indices};

/// A rewrite of contraction networks.
pub type Rule = Rewrite<Contraction, Indices>;

/// Association, both ways: `(a b) c = a (b c)`. With it alone, a chain reaches every one
/// of its parenthesisations and nothing else.
pub fn association() -> Vec<Rule> {
    vec![
        rewrite!("associate-left"; "(* (* ?a ?b) ?c)" => "(* ?a (* ?b ?c))"),
        rewrite!("associate-right"; "(* ?a (* ?b ?c))" => "(* (* ?a ?b) ?c)"),
    ]
}

/// Commutation: `a b = b a` (a contraction of named indices does not depend on the order
/// of its operands). With association, every pairing order of the network's tensors.
pub fn commutation() -> Vec<Rule> {
    vec![rewrite!("commute"; "(* ?a ?b)" => "(* ?b ?a)")]
}

/// The default rules: association and commutation.
pub fn contraction_rules() -> Vec<Rule> {
    let mut rules = association();
    rules.extend(commutation());
    rules
}
