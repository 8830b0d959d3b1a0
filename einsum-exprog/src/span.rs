//! Source locations: where each item of a parsed program was written.

use std::collections::BTreeMap;
use std::fmt;

use crate::action::Action;
use crate::aggregate::Aggregate;
use crate::ids::{AtomId, PartitionId, SiteId};
use crate::membership::Membership;
use crate::program::Requirement;
use crate::target::Target;

/// A 1-based line and column (columns count characters, not bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1.
    pub column: usize,
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// An item of a program that errors can point at. `Display` shows it as error messages
/// do: long lists abbreviated (see [`LISTED`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Item {
    /// The `GPUS` declaration.
    Gpus,
    /// A partition declaration.
    Partition(PartitionId),
    /// An `IN` entry.
    Input(AtomId),
    /// An `OUT` requirement.
    Output(Requirement),
    /// A body action.
    Action(Action),
    /// The end of the program: where a missing section would have to be written.
    End,
}

impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Item::Gpus => f.write_str("GPUS"),
            Item::Partition(p) => write!(f, "partition {}", Brief(p.as_str())),
            Item::Input(a) => write!(f, "IN entry {}", Brief(a.as_str())),
            Item::Output(r) => write!(f, "OUT requirement {}", Brief(r)),
            Item::Action(a) => write!(f, "action {}", Brief(a)),
            Item::End => f.write_str("end of the program"),
        }
    }
}

/// Where each item was written (the first occurrence, for items written twice). Produced by
/// [`parse_with_spans`](crate::parse_with_spans); errors use it to name a line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceMap {
    spans: BTreeMap<Item, Span>,
}

impl SourceMap {
    /// Records `item` at `span` unless it was already recorded.
    pub fn record(&mut self, item: Item, span: Span) {
        self.spans.entry(item).or_insert(span);
    }

    /// Where `item` was written.
    pub fn span(&self, item: &Item) -> Option<Span> {
        self.spans.get(item).copied()
    }
}

/// How many elements of a list an error message shows before "… and N more": enough to
/// recognise the item, few enough that a 100,000-atom aggregate stays one short line.
pub const LISTED: usize = 8;

/// How many characters of a name an error message shows before "…".
pub const NAME_CHARS: usize = 40;

/// An item as error messages show it: aggregates, destination lists and memberships cut
/// after [`LISTED`] elements with "… and N more", names after [`NAME_CHARS`] characters.
/// (`Display` of the item itself stays complete: it is the printer, and must round-trip.)
pub(crate) struct Brief<'a, T: ?Sized>(pub &'a T);

impl fmt::Display for Brief<'_, str> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut chars = self.0.char_indices();
        match chars.nth(NAME_CHARS) {
            None => f.write_str(self.0),
            Some((cut, _)) => write!(f, "{}… ({} characters)", &self.0[..cut], self.0.chars().count()),
        }
    }
}

/// Writes `items` separated by `sep`: the first [`LISTED`], then "… and N more".
fn write_list<T: fmt::Display>(
    f: &mut fmt::Formatter<'_>,
    items: impl ExactSizeIterator<Item = T>,
    sep: &str,
) -> fmt::Result {
    let n = items.len();
    for (i, item) in items.take(LISTED).enumerate() {
        if i > 0 {
            f.write_str(sep)?;
        }
        write!(f, "{item}")?;
    }
    if n > LISTED {
        write!(f, "{sep}… and {} more", n - LISTED)?;
    }
    Ok(())
}

impl fmt::Display for Brief<'_, Aggregate> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_list(f, self.0.atoms().iter().map(|a| Brief(a.as_str())), "+")
    }
}

impl fmt::Display for Brief<'_, Target> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Target::Site(s) => write!(f, "{s}"),
            Target::Partition(p) => write!(f, "{}", Brief(p.as_str())),
        }
    }
}

impl fmt::Display for Brief<'_, Requirement> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} @ {}", Brief(&self.0.aggregate), Brief(&self.0.target))
    }
}

impl fmt::Display for Brief<'_, Action> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} @ {}", Brief(&self.0.aggregate), Brief(&self.0.source))?;
        if !self.0.dests.is_empty() {
            f.write_str(" -> ")?;
            write_list(f, self.0.dests.iter(), ", ")?;
        }
        Ok(())
    }
}

impl fmt::Display for Brief<'_, Membership> {
    /// `G1 = {0, 1, 4, 5}, G2 = {2, 3, 6, 7}`, each list cut after [`LISTED`] sites, and
    /// the partitions after [`LISTED`] partitions.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.0.is_empty() {
            return f.write_str("no partitions");
        }
        struct Part<'a>(&'a PartitionId, &'a std::collections::BTreeSet<SiteId>);
        impl fmt::Display for Part<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{} = {{", Brief(self.0.as_str()))?;
                write_list(f, self.1.iter(), ", ")?;
                f.write_str("}")
            }
        }
        write_list(f, self.0.0.iter().map(|(name, sites)| Part(name, sites)), ", ")
    }
}

#[cfg(test)]
mod tests {
    use super::LISTED;

    /// A 100,000-atom `OUT` once produced a 1.4 MB error line (2,000 atoms here, to stay
    /// fast): every message that shows an aggregate, a destination list, a membership or a
    /// name now abbreviates it.
    #[test]
    fn errors_about_huge_items_stay_short() {
        let n = 2_000;
        let atoms: Vec<String> = (0..n).map(|i| format!("A{i}")).collect();
        let inputs: Vec<String> = atoms.iter().map(|a| format!("{a} @ 0")).collect();
        let out = atoms.join("+");
        let more = format!("… and {} more", n - LISTED);

        // Not valid: the aggregate never reaches site 1 (named twice in the message).
        let src = format!("IN: {}\nOUT: {out} @ 1", inputs.join("; "));
        let e = crate::load_valid(&src).unwrap_err().to_string();
        assert!(e.len() < 400, "{} bytes: {}", e.len(), &e[..400]);
        assert!(e.starts_with("line 2, column 6: OUT requirement A0+A1+A10+A100+"), "{e}");
        assert_eq!(e.matches(&more).count(), 2, "{e}");

        // A static-check failure naming the item: one atom is not in IN.
        let src = format!("IN: {}\nOUT: {out}+Z @ 1", inputs[1..].join("; "));
        let e = crate::load(&src).unwrap_err().to_string();
        assert!(e.len() < 300 && e.contains(&format!("… and {} more", n + 1 - LISTED)), "{e}");

        // A syntax error after a long aggregate, and one at a very long name.
        let e = crate::load(&format!("OUT: {out} 1")).unwrap_err().to_string();
        assert!(e.len() < 300 && e.contains(&more), "{e}");
        let long = "B".repeat(1_000_000);
        let e = crate::load(&format!("IN: {long} 0")).unwrap_err().to_string();
        assert!(e.len() < 300 && e.contains("(1000000 characters)"), "{e}");

        // Destination lists and memberships.
        let sites: Vec<String> = (0..1000).map(|s| s.to_string()).collect();
        let src = format!("GPUS: {}\nIN: A @ 0\nOUT: A @ 1\nA @ 5 -> {}", sites.join(", "), sites[1..].join(", "));
        let e = crate::load_valid(&src).unwrap_err().to_string();
        assert!(e.len() < 300 && e.contains("-> 1, 2, 3, 4, 5, 6, 7, 8, … and 991 more"), "{e}");
    }
}
