//! Roles: what an index or an operator *is* in a model's structure (the token rows, the
//! key/value heads, the FFN hidden index, attention itself).
//!
//! Strategies that follow a model's structure (the hand-designed baselines of
//! `einsum-logical`: data parallelism, Megatron, Ulysses) read roles, never index names or
//! operator kinds, so a graph may name its indices as it likes.
//!
//! # Who declares a role
//! - An operator declares the roles it knows from its own definition
//!   ([`AbstractOperator::index_roles`](crate::AbstractOperator::index_roles) and
//!   [`AbstractOperator::op_role`](crate::AbstractOperator::op_role)): attention knows which
//!   of its indices is the sequence, the query blocks, and the two head indices, and that
//!   it is attention. Operators that know nothing declare nothing (the default).
//! - Whoever builds the graph declares the roles no operator can know (the FFN hidden
//!   index, the token index of a graph without attention) with
//!   [`Computation::declare_role`](crate::Computation::declare_role).
//!
//! Index names are consistent across a graph, so a role is recorded per index *name* for the
//! whole graph ([`Roles`]): declared once, by an operator or by the builder, it applies to
//! that name on every operator (attention's `heads_q` reaches the q and output
//! projections). A name declared with two different roles is an
//! [`Error::RoleConflict`]; several names may share one role.

use std::collections::BTreeMap;
use std::fmt;

use crate::{Error, Result};

/// The role of a tensor index in a transformer-like model: exactly what the baselines need
/// to recognise, no more.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IndexRole {
    /// The token rows of the activations: the index data parallelism splits. In attention,
    /// the sequence index, holding packed sequences that may be cut only at their ends.
    Tokens,
    /// Attention's query-block index: blocks of query rows that each read every key and
    /// value they can see (a split that is not one of the tensors' dimensions).
    QueryBlocks,
    /// The key/value head index (attention's head groups).
    HeadsKv,
    /// The query head index (the q projection, RoPE on queries, the output projection).
    HeadsQ,
    /// The FFN hidden index (`d_ff`): column-parallel in the gate and up projections,
    /// row-parallel in the down projection.
    FfnHidden,
}

impl IndexRole {
    /// The role's name in messages: `tokens`, `query_blocks`, `heads_kv`, `heads_q`,
    /// `ffn_hidden`.
    pub fn name(self) -> &'static str {
        match self {
            IndexRole::Tokens => "tokens",
            IndexRole::QueryBlocks => "query_blocks",
            IndexRole::HeadsKv => "heads_kv",
            IndexRole::HeadsQ => "heads_q",
            IndexRole::FfnHidden => "ffn_hidden",
        }
    }
}

impl fmt::Display for IndexRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The role of a whole operator in a model's structure, for strategies defined around it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpRole {
    /// Scaled dot-product attention: Ulysses and Megatron split it by heads.
    Attention,
}

impl OpRole {
    /// The role's name in messages: `attention`.
    pub fn name(self) -> &'static str {
        match self {
            OpRole::Attention => "attention",
        }
    }
}

impl fmt::Display for OpRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The roles of a graph's index names, each with who declared it first (for messages).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Roles(BTreeMap<String, (IndexRole, String)>);

impl Roles {
    /// No role declared.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that index `name` has `role`, declared by `by` (e.g. `operator `attention #7``).
    /// Declaring a name's role again with the same role does nothing; with another role it
    /// is an [`Error::RoleConflict`] naming both declarations, and nothing changes.
    pub fn declare(&mut self, name: &str, role: IndexRole, by: &str) -> Result<()> {
        match self.0.get(name) {
            Some((first, _)) if *first == role => Ok(()),
            Some((first, first_by)) => Err(Error::RoleConflict {
                index: name.to_string(),
                first: *first,
                first_by: first_by.clone(),
                second: role,
                second_by: by.to_string(),
            }),
            None => {
                self.0.insert(name.to_string(), (role, by.to_string()));
                Ok(())
            }
        }
    }

    /// Records every `(name, role)` of `roles`, declared by `by`, or none of them when one
    /// conflicts (with this table or with an earlier pair of `roles`).
    pub fn declare_all(&mut self, roles: &[(String, IndexRole)], by: &str) -> Result<()> {
        let mut next = self.clone();
        for (name, role) in roles {
            next.declare(name, *role, by)?;
        }
        *self = next;
        Ok(())
    }

    /// The role of index `name`, if one was declared.
    pub fn get(&self, name: &str) -> Option<IndexRole> {
        self.0.get(name).map(|(role, _)| *role)
    }

    /// Every declared `(name, role)`, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, IndexRole)> {
        self.0.iter().map(|(name, (role, _))| (name.as_str(), *role))
    }

    /// True when no role is declared.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_keeps_one_role_and_a_conflict_names_both_declarations() {
        let mut roles = Roles::new();
        roles.declare("d_ff", IndexRole::FfnHidden, "the graph").unwrap();
        roles.declare("d_ff", IndexRole::FfnHidden, "operator `x`").unwrap();
        roles.declare("hidden", IndexRole::FfnHidden, "the graph").unwrap();
        let err = roles.declare("d_ff", IndexRole::Tokens, "operator `attention #3`").unwrap_err();
        assert_eq!(
            err,
            Error::RoleConflict {
                index: "d_ff".into(),
                first: IndexRole::FfnHidden,
                first_by: "the graph".into(),
                second: IndexRole::Tokens,
                second_by: "operator `attention #3`".into(),
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("`d_ff`") && msg.contains("ffn_hidden") && msg.contains("attention #3"), "{msg}");
        assert_eq!(roles.get("d_ff"), Some(IndexRole::FfnHidden));
        assert_eq!(roles.iter().count(), 2);
    }

    #[test]
    fn declare_all_is_all_or_nothing() {
        let mut roles = Roles::new();
        let pairs = vec![("s".to_string(), IndexRole::Tokens), ("s".to_string(), IndexRole::HeadsQ)];
        assert!(matches!(roles.declare_all(&pairs, "op"), Err(Error::RoleConflict { .. })));
        assert!(roles.is_empty());
        roles.declare_all(&pairs[..1], "op").unwrap();
        assert_eq!(roles.get("s"), Some(IndexRole::Tokens));
    }
}
