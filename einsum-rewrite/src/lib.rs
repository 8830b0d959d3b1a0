//! Algebraic rewrites of tensor computations by equality saturation ([`egg`]).
//!
//! The first form rewritten here is the contraction network ([`Network`]): tensors whose
//! named indices are either kept in the result or join exactly two tensors, contracted
//! pairwise in some order, as a matrix chain is (the paper's chains `A`-`E`) or a low-rank
//! adapter written `x·(A·B)`. A form of the network is a binary tree of contractions
//! ([`Tree`]); the rules ([`rules`], values a caller chooses and extends) say which forms are
//! equal; [`forms`] saturates an e-graph of the written form under them, within node and
//! iteration [`Limits`] (not wall time, so the forms found do not depend on the machine), and
//! extracts the `k` cheapest by flops, or by a [`Cost`] of flops, elements moved and launches
//! ([`forms_by`]), for a planner to weigh by whole-plan prediction. Each form becomes einsum
//! steps ([`Tree::steps`]).
//!
//! ```
//! use einsum_rewrite::{Limits, Network, Tree, forms, rules};
//!
//! // x (8x1024) times A (1024x4) times B (4x1024), written x·(A·B): a 1024x1024 product first.
//! let n = Network::new(
//!     &[&["t", "d"], &["d", "r"], &["r", "e"]],
//!     &[("t", 8), ("d", 1024), ("r", 4), ("e", 1024)],
//!     &["t", "e"],
//! )?;
//! let written = Tree::Contract(
//!     Box::new(Tree::Leaf(0)),
//!     Box::new(Tree::Contract(Box::new(Tree::Leaf(1)), Box::new(Tree::Leaf(2)))),
//! );
//! let found = forms(&n, &written, &rules::contraction_rules(), 3, Limits::default())?;
//! let (flops, best) = &found.trees[0];
//! // x·A first (written with operands in canonical order: tensor 2 before the pair).
//! assert_eq!(best.to_string(), "(t2 (t0 t1))");
//! assert!(written.flops(&n) / flops > 100.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

mod cost;
mod forms;
mod lang;
mod network;
pub mod rules;
mod tree;

pub use cost::Cost;
pub use forms::{Forms, FormsError, Limits, forms, forms_by};
pub use lang::{Contraction, Indices};
pub use network::{Network, NetworkError};
pub use rules::Rule;
pub use tree::{Operand, Step, StepError, Tree};
