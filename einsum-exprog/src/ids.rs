//! Newtype identifiers: sites (GPUs), atom names and partition names.

use std::fmt;

/// A site (a GPU), written as a non-negative integer: `0`, `1`, ... It is the simulator's
/// site, re-exported: a program's sites are the topology's, with no conversion between them.
pub use einsum_sim::SiteId;

/// A name that is not an ExProg identifier (`[A-Za-z_][A-Za-z0-9_]*`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a valid name: names are a letter or '_' followed by letters, digits or '_'")]
pub struct InvalidName(pub String);

/// Whether `s` is an ExProg identifier: a letter or `_`, then letters, digits or `_` (ASCII).
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' => chars.all(|c| c.is_ascii_alphanumeric() || c == '_'),
        _ => false,
    }
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// Checks that `name` is an identifier (so that the printed program parses back).
            pub fn new(name: &str) -> Result<Self, InvalidName> {
                if is_identifier(name) { Ok(Self(name.to_string())) } else { Err(InvalidName(name.to_string())) }
            }

            /// The name as written.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = InvalidName;
            fn from_str(s: &str) -> Result<Self, InvalidName> {
                Self::new(s)
            }
        }
    };
}

name_type!(
    /// The name of an atom: a tensor piece with a size, placed at one site by `IN`.
    AtomId
);

name_type!(
    /// The name of a partition (a named group of sites) declared under `PARTITIONS`.
    PartitionId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        assert!(is_identifier("A"));
        assert!(is_identifier("_x1"));
        assert!(is_identifier("G2"));
        assert!(!is_identifier(""));
        assert!(!is_identifier("1A"));
        assert!(!is_identifier("A-B"));
        assert!(!is_identifier("é"));
        assert!(AtomId::new("A B").is_err());
        assert_eq!(AtomId::new("X1").unwrap().as_str(), "X1");
    }
}
