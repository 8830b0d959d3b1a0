//! ExProg, the exchange-program language of Section 5.2: its syntax, its semantics
//! (Definition 5.5) and the sound rewrites of Section 5.4.
//!
//! An exchange program moves and ⊕-aggregates *atoms* (tensor pieces) between *sites*
//! (GPUs). Its preamble says where atoms start (`IN`) and which aggregates must end where
//! (`OUT`); its body is a **set** of actions that fire by dataflow.
//!
//! - AST: [`Program`], [`Action`], [`Aggregate`], [`Target`], [`PartitionSpec`],
//!   [`Requirement`], [`Input`], with newtype ids [`SiteId`], [`AtomId`], [`PartitionId`].
//! - Syntax: [`parse`], [`parse_with_spans`] (with a [`SourceMap`] for error locations) and
//!   `Display` (the printer; `parse(&p.to_string()) == Ok(p)` for every checked program).
//! - Static checks: [`Program::check`], [`Program::check_in`].
//! - Semantics: [`Program::closure`] (with the firing order and dependencies a simulator
//!   needs), [`Program::validate`] (searching memberships of partitions declared by size),
//!   [`Program::validate_with`], [`Program::well_formed`].
//! - Rewrites: [`rewrite`].
//! - Preambles (Section 5.3): [`preamble`] turns a producer's blocks and placement and a
//!   consumer's spec into the atoms and the `GPUS`/`PARTITIONS`/`IN`/`OUT` header.
//! - Refinement: [`refine`] cuts every atom into `k` chunks (and [`Preamble::refined`] the
//!   cells of a preamble), so that synthesis can pipeline; [`refinement_of`] checks that a
//!   program over chunks answers a preamble.
//! - Cost: [`simulate`] lowers a program's closure to an `einsum-sim` task DAG ([`lower()`])
//!   and simulates it on a topology, choosing the fastest valid membership.
//! - Synthesis: [`synth::naive`] and [`synth::search`].
//! - [`load`]: parse, check and report errors with their line.
//!
//! # Syntax
//!
//! ```text
//! GPUS: 0, 1, 2, 3                          # optional; without it, the sites are those used
//! PARTITIONS: G1 {size 2} G2 {2, 3}         # by size (membership chosen) or by members
//! IN: A @ 0; B @ 1 (size: 0.5 GB)           # one site per atom; size defaults to 1 GB
//! OUT: A+B @ G1; A @ 2, 3                   # required aggregates at sites or partitions
//! A @ 0 -> 1; B @ 1 -> 0                    # body: actions separated by ';' or new lines
//! A+B @ G1                                  # local aggregation at every site of G1
//! A @ 0 -> 2, 3                             # multicast
//! ```
//!
//! Header sections (`GPUS`, `PARTITIONS`, `IN`, `OUT`, each at most once, in any order) come
//! before the body and end at the end of their line; within them items are separated by `;`
//! (`,` between sites, spaces or `,`/`;` between partitions). `X @ 0, 1` in the body is sugar
//! for `X @ 0` and `X @ 1`. Sizes take a unit: `GB`, `MB`, `KB` or `B` (decimal). A line may
//! continue after `,`, `+`, `@`, `->`, `(` or `{`. `#` and `//` start comments.
//!
//! ```text
//! program     := header* body
//! header      := 'GPUS' ':' [site (',' site)*] [';']
//!              | 'PARTITIONS' ':' (name partition [',' | ';'])*
//!              | 'IN' ':' [input (';' input)*] [';']
//!              | 'OUT' ':' [require (';' require)*] [';']          each ends at the end of its line
//! partition   := '{' 'size' [':'] int '}' | '{' [site (',' site)*] '}'
//! input       := atom '@' site ['(' 'size' [':'] number unit ')']     unit := GB | MB | KB | B
//! require     := aggregate '@' target (',' target)*
//! body        := [action] ((';' | newline) [action])*
//! action      := aggregate '@' target (',' target)* ['->' site (',' site)*]
//! aggregate   := atom ('+' atom)*                  (distinct atoms)
//! target      := site | name
//! site        := non-negative integer (u32); atom, name := [A-Za-z_][A-Za-z0-9_]*
//! ```
//!
//! A header keyword is only a keyword when followed by `:`, so atoms may be called `IN`.
//!
//! ```
//! let p = einsum_exprog::load("IN: A @ 0; B @ 1\nOUT: A+B @ 0, 1\nA @ 0 -> 1\nB @ 1 -> 0\nA+B @ 0, 1").unwrap();
//! assert!(p.validate().is_ok());
//! ```
#![warn(missing_docs)]

mod action;
mod aggregate;
mod atomset;
mod check;
mod closure;
mod cost;
mod cover;
mod ids;
mod lexer;
mod lower;
mod membership;
mod membership_search;
mod parser;
mod partition;
mod preamble;
mod printer;
mod program;
mod refine;
mod relabel;
pub mod rewrite;
mod span;
pub mod synth;
mod target;
mod validity;

pub use action::Action;
pub use aggregate::{Aggregate, EmptyAggregate};
pub use check::{CheckError, CheckErrorKind};
pub use closure::{Closure, Firing, Materialization, Producer};
pub use cost::{
    ActionTime, MAX_SIMULATED_MEMBERSHIPS, SimulateError, Simulation, TimeSpan, completion_ms, simulate, simulate_with,
};
pub use ids::{AtomId, InvalidName, PartitionId, SiteId, is_identifier};
pub use lower::{FiringTasks, Lowering, lower};
pub use membership::Membership;
pub use membership_search::{MAX_EVALUATIONS, MAX_NODES};
pub use parser::{ParseError, parse, parse_with_spans};
pub use partition::PartitionSpec;
pub use preamble::{Atom, AtomCopy, ConsumerInput, Preamble, PreambleError, Side, Upstream, preamble, preamble_with};
pub use program::{DEFAULT_SIZE_GB, Input, MAX_SIZE_GB, Program, Requirement};
pub use refine::{RefineError, chunk_name, refine, refinement_of};
pub use relabel::Relabelling;
pub use span::{Item, SourceMap, Span};
pub use target::Target;
pub use validity::{Failure, Invalid, Validation, ValidityError};

/// Anything [`load`] or [`load_valid`] can report, with the line where one exists.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A syntax error.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// A static-check failure.
    #[error(transparent)]
    Check(#[from] CheckError),
    /// The program is not valid (or validity could not be decided).
    #[error(transparent)]
    Invalid(#[from] ValidityError),
}

/// Parses `src` and runs the static checks; errors name the line of the item at fault.
pub fn load(src: &str) -> Result<Program, Error> {
    let (program, map) = parse_with_spans(src)?;
    program.check_in(&map)?;
    Ok(program)
}

/// [`load`], then [`Program::validate`]; an invalid program's error names the line of the
/// failing action or `OUT` requirement.
pub fn load_valid(src: &str) -> Result<(Program, Validation), Error> {
    let (program, map) = parse_with_spans(src)?;
    program.check_in(&map)?;
    let validation = program.validate().map_err(|e| e.locate(&map))?;
    Ok((program, validation))
}
