//! Static checks: everything that can be wrong with a program before running its semantics.

use std::collections::BTreeMap;
use std::fmt;

use crate::ids::{AtomId, PartitionId, SiteId};
use crate::partition::PartitionSpec;
use crate::program::{MAX_SIZE_GB, Program};
use crate::span::{Brief, Item, SourceMap, Span};
use crate::target::Target;

/// What a static check found.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CheckErrorKind {
    /// Partitions need `GPUS` to be declared (they must cover it).
    #[error("PARTITIONS needs a GPUS declaration to partition")]
    PartitionsWithoutGpus,
    /// A site that `GPUS` does not list.
    #[error("site {0} is not declared in GPUS")]
    UndeclaredSite(SiteId),
    /// A partition name with no declaration.
    #[error("partition {} is not declared", Brief(.0.as_str()))]
    UnknownPartition(PartitionId),
    /// An atom that `IN` does not place.
    #[error("atom {} is not declared in IN", Brief(.0.as_str()))]
    UnknownAtom(AtomId),
    /// A partition of no site.
    #[error("partition {} is empty", Brief(.0.as_str()))]
    EmptyPartition(PartitionId),
    /// Two partitions share a site.
    #[error("site {site} is in both {} and {}: partitions must be disjoint", Brief(first.as_str()), Brief(second.as_str()))]
    PartitionOverlap {
        /// The shared site.
        site: SiteId,
        /// One partition.
        first: PartitionId,
        /// The other.
        second: PartitionId,
    },
    /// A declared site that no (explicit) partition holds.
    #[error("site {0} is in no partition: partitions must cover GPUS")]
    UncoveredSite(SiteId),
    /// Partition sizes do not add up to the number of GPUs.
    #[error("partition sizes add up to {sum} but GPUS declares {gpus} sites")]
    PartitionSizeSum {
        /// Sum of the partition sizes.
        sum: usize,
        /// Number of declared GPUs.
        gpus: usize,
    },
    /// An atom size that is not a positive finite number of GB, at most [`MAX_SIZE_GB`].
    #[error("atom {} has size {size:?} GB; sizes must be positive, finite and at most {max:e} GB", Brief(atom.as_str()), max = MAX_SIZE_GB)]
    BadSize {
        /// The atom.
        atom: AtomId,
        /// Its size.
        size: f64,
    },
    /// An action that sends from a site to the same site.
    #[error("sends to its own source site {0}")]
    SelfTransfer(SiteId),
    /// A program with nothing in it: it asks for nothing, so it would be vacuously valid.
    #[error("the program is empty: {NEEDS_IN_AND_OUT}")]
    EmptyProgram,
    /// A program without `OUT` requirements (a body alone, or only `IN`): it asks for
    /// nothing, so it would be vacuously valid.
    #[error("the program has no OUT section: {NEEDS_IN_AND_OUT}")]
    NoOutputs,
}

/// What [`CheckErrorKind::EmptyProgram`] and [`CheckErrorKind::NoOutputs`] tell the user.
const NEEDS_IN_AND_OUT: &str = "an exchange program needs IN (where each atom starts) and OUT (what must end up where)";

/// A static-check failure: the item at fault, where it was written (when known) and what.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckError {
    /// The item at fault (boxed to keep `Result`s small).
    pub item: Box<Item>,
    /// Where it was written, when the program came from source.
    pub span: Option<Span>,
    /// What is wrong.
    pub kind: CheckErrorKind,
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(span) = self.span {
            write!(f, "{span}: ")?;
        }
        // A failure of the whole program names no item: its kind says what is missing.
        if *self.item != Item::End {
            write!(f, "{}: ", self.item)?;
        }
        write!(f, "{}", self.kind)
    }
}

impl std::error::Error for CheckError {}

impl Program {
    /// Runs the static checks and returns the first failure (see [`Program::check_all`]).
    pub fn check(&self) -> Result<(), CheckError> {
        self.check_all().into_iter().next().map_or(Ok(()), Err)
    }

    /// Runs the static checks and returns the failure written earliest in the source.
    pub fn check_in(&self, map: &SourceMap) -> Result<(), CheckError> {
        let mut errors = self.check_all();
        for e in &mut errors {
            e.span = map.span(&e.item);
        }
        errors.sort_by_key(|e| e.span.map_or((usize::MAX, usize::MAX), |s| (s.line, s.column)));
        errors.into_iter().next().map_or(Ok(()), Err)
    }

    /// Every static-check failure: a program without `OUT` requirements (which would be
    /// vacuously valid), undeclared sites, unknown atoms and partitions, partitions that are
    /// empty, overlap, do not cover `GPUS` or whose sizes do not add up to it, bad sizes,
    /// self-transfers. (Duplicates in `IN`, `GPUS` or partition lists cannot be represented
    /// and are syntax errors.)
    pub fn check_all(&self) -> Vec<CheckError> {
        let mut errors = Vec::new();
        let mut push =
            |item: Item, kind: CheckErrorKind| errors.push(CheckError { item: Box::new(item), span: None, kind });

        if self.outputs.is_empty() {
            let empty = self.inputs.is_empty() && self.body.is_empty() && self.gpus.is_none();
            push(Item::End, if empty { CheckErrorKind::EmptyProgram } else { CheckErrorKind::NoOutputs });
        }

        if let Some(gpus) = &self.gpus {
            let mut site = |s: SiteId, item: &Item| {
                if !gpus.contains(&s) {
                    push(item.clone(), CheckErrorKind::UndeclaredSite(s));
                }
            };
            for (name, spec) in &self.partitions {
                for s in spec.members().into_iter().flatten() {
                    site(*s, &Item::Partition(name.clone()));
                }
            }
            for (atom, input) in &self.inputs {
                site(input.site, &Item::Input(atom.clone()));
            }
            for r in &self.outputs {
                if let Target::Site(s) = r.target {
                    site(s, &Item::Output(r.clone()));
                }
            }
            for a in &self.body {
                let item = Item::Action(a.clone());
                if let Target::Site(s) = a.source {
                    site(s, &item);
                }
                for d in &a.dests {
                    site(*d, &item);
                }
            }
        }

        self.check_partitions(&mut push);

        for (atom, input) in &self.inputs {
            if !(input.size_gb.is_finite() && input.size_gb > 0.0 && input.size_gb <= MAX_SIZE_GB) {
                push(Item::Input(atom.clone()), CheckErrorKind::BadSize { atom: atom.clone(), size: input.size_gb });
            }
        }
        let mut names = |agg: &crate::Aggregate, target: &Target, item: Item| {
            for atom in agg.atoms() {
                if !self.inputs.contains_key(atom) {
                    push(item.clone(), CheckErrorKind::UnknownAtom(atom.clone()));
                }
            }
            if let Target::Partition(p) = target
                && !self.partitions.contains_key(p)
            {
                push(item, CheckErrorKind::UnknownPartition(p.clone()));
            }
        };
        for r in &self.outputs {
            names(&r.aggregate, &r.target, Item::Output(r.clone()));
        }
        for a in &self.body {
            names(&a.aggregate, &a.source, Item::Action(a.clone()));
        }
        for a in &self.body {
            if let Target::Site(s) = a.source
                && a.dests.contains(&s)
            {
                push(Item::Action(a.clone()), CheckErrorKind::SelfTransfer(s));
            }
        }
        errors
    }

    fn check_partitions(&self, push: &mut impl FnMut(Item, CheckErrorKind)) {
        let Some((first, _)) = self.partitions.iter().next() else { return };
        let Some(gpus) = &self.gpus else {
            push(Item::Partition(first.clone()), CheckErrorKind::PartitionsWithoutGpus);
            return;
        };
        let mut owner: BTreeMap<SiteId, &PartitionId> = BTreeMap::new();
        let mut overlap = false;
        for (name, spec) in &self.partitions {
            if spec.size() == 0 {
                push(Item::Partition(name.clone()), CheckErrorKind::EmptyPartition(name.clone()));
            }
            for s in spec.members().into_iter().flatten() {
                if let Some(other) = owner.insert(*s, name) {
                    overlap = true;
                    push(
                        Item::Partition(name.clone()),
                        CheckErrorKind::PartitionOverlap { site: *s, first: other.clone(), second: name.clone() },
                    );
                }
            }
        }
        if overlap {
            return;
        }
        if !self.has_size_partitions() {
            let uncovered: Vec<SiteId> = gpus.iter().filter(|s| !owner.contains_key(s)).copied().collect();
            for s in &uncovered {
                push(Item::Gpus, CheckErrorKind::UncoveredSite(*s));
            }
            if !uncovered.is_empty() {
                return;
            }
        }
        let sum = self.partitions.values().map(PartitionSpec::size).fold(0usize, usize::saturating_add);
        if sum != gpus.len() {
            push(Item::Partition(first.clone()), CheckErrorKind::PartitionSizeSum { sum, gpus: gpus.len() });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CheckErrorKind;
    use crate::{SiteId, parse_with_spans, program::Program};

    fn first_error(src: &str) -> String {
        let (p, map): (Program, _) = parse_with_spans(src).unwrap();
        p.check_in(&map).unwrap_err().to_string()
    }

    #[test]
    fn checks_name_the_line() {
        assert_eq!(
            first_error("GPUS: 0, 1\nIN: A @ 0\nA @ 0 -> 2"),
            "line 3, column 1: action A @ 0 -> 2: site 2 is not declared in GPUS"
        );
        assert_eq!(
            first_error("IN: A @ 0\nOUT: B @ 0"),
            "line 2, column 6: OUT requirement B @ 0: atom B is not declared in IN"
        );
        assert!(first_error("GPUS: 0\nIN: A @ 0\nOUT: A @ G").contains("partition G is not declared"));
        assert!(first_error("GPUS: 0, 1\nPARTITIONS: G {0} H {0, 1}").contains("in both G and H"));
        assert!(first_error("GPUS: 0, 1\nPARTITIONS: G {0}").contains("site 1 is in no partition"));
        assert!(first_error("GPUS: 0, 1, 2\nPARTITIONS: G {size 2} H {size 2}").contains("add up to 4"));
        assert!(first_error("GPUS: 0, 1\nPARTITIONS: G {size 0} H {0, 1}").contains("empty"));
        assert!(first_error("PARTITIONS: G {size 1}").contains("needs a GPUS"));
        let e = first_error("IN: A @ 0 (size: 1e308 GB)");
        assert!(e.contains("atom A has size 1e308 GB") && e.contains("at most 1e12 GB"), "{e}");
        assert!(first_error("IN: A @ 0 (size: 2e21 B)").contains("at most 1e12 GB"));
        assert!(first_error("IN: A @ 0\nA @ 0 -> 0").contains("own source"));
        let p: Program = "GPUS: 0\nPARTITIONS: G {1}".parse().unwrap();
        assert!(p.check_all().iter().any(|e| e.kind == CheckErrorKind::UndeclaredSite(SiteId(1))));
    }

    /// The fuzz target's first input, the empty string: `Program::check` accepted what `load`
    /// refused. Both now refuse a program without `OUT`, with the same kind of error.
    #[test]
    fn check_and_load_agree_on_programs_without_out() {
        for (src, kind) in [
            ("", CheckErrorKind::EmptyProgram),
            ("# a comment\n", CheckErrorKind::EmptyProgram),
            ("IN: A @ 0", CheckErrorKind::NoOutputs),
            ("GPUS: 0", CheckErrorKind::NoOutputs),
            ("IN: A @ 0; B @ 1\nA @ 0 -> 1", CheckErrorKind::NoOutputs),
        ] {
            let p: Program = src.parse().unwrap();
            assert_eq!(p.check().map_err(|e| e.kind), Err(kind.clone()), "{src:?}");
            match crate::load(src) {
                Err(crate::Error::Check(e)) => assert_eq!(e.kind, kind, "{src:?}"),
                other => panic!("{src:?}: load gave {other:?}"),
            }
        }
        assert_eq!(first_error("IN: A @ 0\n"), format!("line 2, column 1: {}", CheckErrorKind::NoOutputs));
    }

    #[test]
    fn accepts_good_programs() {
        let (p, map) =
            parse_with_spans("GPUS: 0, 1, 2, 3\nPARTITIONS: G1 {size 2} G2 {2, 3}\nIN: A @ 0\nOUT: A @ G1").unwrap();
        assert_eq!(p.check_in(&map), Ok(()));
        assert_eq!(p.check(), Ok(()));
    }
}
