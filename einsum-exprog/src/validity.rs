//! Well-formedness and validity (Definition 5.5) under a membership, and their errors.

use std::collections::BTreeSet;
use std::fmt;

use crate::action::Action;
use crate::check::CheckError;
use crate::closure::Closure;
use crate::ids::SiteId;
use crate::membership::Membership;
use crate::membership_search::{Goal, search_membership};
use crate::partition::PartitionSpec;
use crate::program::{Program, Requirement};
use crate::span::{Brief, Item, SourceMap, Span};

/// Why a program is not valid under some membership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The closure never enables this action at this site (the program is not well-formed).
    NotEnabled {
        /// The action.
        action: Action,
        /// The source site where it cannot be formed.
        site: SiteId,
    },
    /// An `OUT` requirement is not in the closure at this site.
    MissingOutput {
        /// The requirement.
        requirement: Requirement,
        /// The site lacking it.
        site: SiteId,
    },
}

impl Failure {
    /// The program item at fault.
    pub fn item(&self) -> Item {
        match self {
            Failure::NotEnabled { action, .. } => Item::Action(action.clone()),
            Failure::MissingOutput { requirement, .. } => Item::Output(requirement.clone()),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::NotEnabled { action, site } => write!(
                f,
                "action {} is never enabled at site {site}: no disjoint aggregates materialised there make up {}",
                Brief(action),
                Brief(&action.aggregate)
            ),
            Failure::MissingOutput { requirement, site } => {
                write!(
                    f,
                    "OUT requirement {} is not met: {} never reaches site {site}",
                    Brief(requirement),
                    Brief(&requirement.aggregate)
                )
            }
        }
    }
}

/// A program that is not valid: its first failure under `membership` (for partitions declared
/// by size, the best membership tried: the one with the fewest failures).
#[derive(Clone, Debug, PartialEq)]
pub struct Invalid {
    /// The first failure.
    pub failure: Failure,
    /// How many failures there are in all.
    pub failures: usize,
    /// The membership the failures are relative to.
    pub membership: Membership,
    /// Where the failing item was written, when known (see [`ValidityError::locate`]).
    pub span: Option<Span>,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(span) = self.span {
            write!(f, "{span}: ")?;
        }
        write!(f, "{}", self.failure)?;
        if self.failures > 1 {
            write!(f, " (and {} more failures)", self.failures - 1)?;
        }
        if !self.membership.0.is_empty() {
            write!(f, " with {}", Brief(&self.membership))?;
        }
        Ok(())
    }
}

/// Why a program could not be shown valid (or well-formed).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ValidityError {
    /// A static check failed.
    #[error(transparent)]
    Check(#[from] CheckError),
    /// The program is not valid (boxed to keep `Result`s small).
    #[error("{0}")]
    Invalid(Box<Invalid>),
    /// The membership given does not fit the partitions.
    #[error("bad membership: {0}")]
    BadMembership(String),
    /// A partition an action or requirement names has no sites in the membership.
    #[error("partition {0} has no membership")]
    UnknownPartition(String),
    /// The membership search gave up (it is bounded so as never to hang).
    #[error("gave up searching partition memberships after {tried} candidates ({nodes} search steps)")]
    SearchLimit {
        /// Full memberships evaluated.
        tried: usize,
        /// Partial assignments explored.
        nodes: usize,
    },
    /// An exact-cover search ran past its budget (a pathological program).
    #[error("gave up deciding whether {} is enabled at site {site}: too many overlapping pieces", Brief(action))]
    CoverLimit {
        /// The action.
        action: Action,
        /// The site.
        site: SiteId,
    },
}

impl ValidityError {
    /// Fills in where the failing item was written.
    pub fn locate(self, map: &SourceMap) -> Self {
        match self {
            ValidityError::Check(mut e) => {
                e.span = map.span(&e.item);
                ValidityError::Check(e)
            }
            ValidityError::Invalid(mut invalid) => {
                invalid.span = map.span(&invalid.failure.item());
                ValidityError::Invalid(invalid)
            }
            other => other,
        }
    }

    /// The number of failures, for an invalid program.
    pub fn failures(&self) -> Option<usize> {
        match self {
            ValidityError::Invalid(invalid) => Some(invalid.failures),
            _ => None,
        }
    }
}

/// A program shown valid (or well-formed): the membership that works and the closure under it.
#[derive(Clone, Debug)]
pub struct Validation {
    /// The sites of every partition (declared, or found by the search).
    pub membership: Membership,
    /// `S*(P)` under that membership.
    pub closure: Closure,
}

impl Program {
    /// Checks that `membership` fits the partitions: every partition present, explicit ones
    /// as declared, sized ones of their size, all disjoint and within the sites.
    pub fn check_membership(&self, membership: &Membership) -> Result<(), ValidityError> {
        let sites = self.sites();
        let mut used = BTreeSet::new();
        for (name, spec) in &self.partitions {
            let Some(m) = membership.sites(name) else {
                return Err(ValidityError::BadMembership(format!("partition {name} has no sites")));
            };
            match spec {
                PartitionSpec::Members(declared) if declared != m => {
                    return Err(ValidityError::BadMembership(format!("partition {name} is declared {spec}")));
                }
                PartitionSpec::Size(k) if m.len() != *k => {
                    return Err(ValidityError::BadMembership(format!("partition {name} must have {k} sites")));
                }
                _ => {}
            }
            for s in m {
                if !sites.contains(s) {
                    return Err(ValidityError::BadMembership(format!("site {s} of {name} is not declared")));
                }
                if !used.insert(*s) {
                    return Err(ValidityError::BadMembership(format!("site {s} is in two partitions")));
                }
            }
        }
        if let Some(extra) = membership.0.keys().find(|k| !self.partitions.contains_key(*k)) {
            return Err(ValidityError::BadMembership(format!("partition {extra} is not declared")));
        }
        Ok(())
    }

    /// Decides validity (or only well-formedness) under a membership already checked.
    pub(crate) fn evaluate(&self, membership: &Membership, goal: Goal) -> Result<Validation, ValidityError> {
        let closure = self.closure(membership)?;
        let mut failures: Vec<Failure> = closure
            .not_enabled()
            .iter()
            .map(|(action, site)| Failure::NotEnabled { action: action.clone(), site: *site })
            .collect();
        if goal == Goal::Valid {
            for r in &self.outputs {
                let sites = membership
                    .resolve(&r.target)
                    .ok_or_else(|| ValidityError::UnknownPartition(r.target.to_string()))?;
                for site in sites {
                    if !closure.contains(&r.aggregate, site) {
                        failures.push(Failure::MissingOutput { requirement: r.clone(), site });
                    }
                }
            }
        }
        let count = failures.len();
        match failures.into_iter().next() {
            None => Ok(Validation { membership: membership.clone(), closure }),
            Some(failure) => Err(ValidityError::Invalid(Box::new(Invalid {
                failure,
                failures: count,
                membership: membership.clone(),
                span: None,
            }))),
        }
    }

    /// Validity under a given membership: static checks, then Definition 5.5.
    pub fn validate_with(&self, membership: &Membership) -> Result<Validation, ValidityError> {
        self.check()?;
        self.check_membership(membership)?;
        self.evaluate(membership, Goal::Valid)
    }

    /// Well-formedness under a given membership (every action enabled by the closure).
    pub fn well_formed_with(&self, membership: &Membership) -> Result<Validation, ValidityError> {
        self.check()?;
        self.check_membership(membership)?;
        self.evaluate(membership, Goal::WellFormed)
    }

    /// Validity: static checks, then Definition 5.5 under the declared membership, or, with
    /// partitions declared by size, under some membership found by a bounded search (which
    /// it returns). When none works, the error describes the best attempt.
    pub fn validate(&self) -> Result<Validation, ValidityError> {
        search_membership(self, Goal::Valid)
    }

    /// Well-formedness under some membership (found as [`Program::validate`] finds one).
    pub fn well_formed(&self) -> Result<Validation, ValidityError> {
        search_membership(self, Goal::WellFormed)
    }

    /// Whether [`Program::validate`] succeeds.
    pub fn is_valid(&self) -> bool {
        self.validate().is_ok()
    }
}
