//! Source locations: where each item of a parsed program was written.

use std::collections::BTreeMap;
use std::fmt;

use crate::action::Action;
use crate::ids::{AtomId, PartitionId};
use crate::program::Requirement;

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

/// An item of a program that errors can point at.
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
            Item::Partition(p) => write!(f, "partition {p}"),
            Item::Input(a) => write!(f, "IN entry {a}"),
            Item::Output(r) => write!(f, "OUT requirement {r}"),
            Item::Action(a) => write!(f, "action {a}"),
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
