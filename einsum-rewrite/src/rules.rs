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

/// The rules the planner uses by default: association. With it a chain of `n` tensors has
/// about `n³/6` e-nodes (one per split of each run of the chain), so chains of dozens of
/// matrices saturate in milliseconds; commutation would add every subset of the tensors
/// (exponentially many e-classes, pairings of tensors that share no index: outer products).
pub fn default_rules() -> Vec<Rule> {
    association()
}

/// Association and commutation: every pairing order of the network's tensors (exponential in
/// the tensors; within [`crate::Limits`]).
pub fn contraction_rules() -> Vec<Rule> {
    let mut rules = association();
    rules.extend(commutation());
    rules
}
