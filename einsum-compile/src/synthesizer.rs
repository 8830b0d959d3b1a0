//! Exchange synthesis as a value: [`ExchangeSynthesizer`] answers one exchange problem (a
//! preamble on a topology) with a program, and [`PhysicalOptions::synthesizer`](crate::PhysicalOptions::synthesizer)
//! says which one a compile uses. The project's two are [`NaiveSynthesizer`] (gather and
//! aggregate at each target) and [`SearchSynthesizer`] (the seeded annealing of
//! [`einsum_exprog::synth::search`]); a third is any other implementation, from any crate.
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::Arc;
//!
//! use einsum_compile::{PhysicalOptions, ExchangeSynthesizer, Exchanges, Synthesized, compile};
//! use einsum_core::{DType, TensorDesc};
//! use einsum_exprog::Preamble;
//! use einsum_exprog::synth::{SynthError, naive};
//! use einsum_joinagg::{Computation, enumerate_specs};
//! use einsum_ops::einsum::Einsum;
//! use einsum_sim::Topology;
//!
//! /// The naive program, its partitions placed by the simulator's membership search: a
//! /// synthesizer of another crate.
//! #[derive(Debug)]
//! struct Gather;
//!
//! impl ExchangeSynthesizer for Gather {
//!     fn name(&self) -> &str {
//!         "gather"
//!     }
//!     fn identity(&self) -> String {
//!         "gather".to_string()
//!     }
//!     fn synthesize(&self, preamble: &Preamble, topology: &Topology) -> Result<Synthesized, SynthError> {
//!         let program = naive(&preamble.program)?;
//!         let sim = einsum_exprog::simulate(&program, topology)?;
//!         Ok(Synthesized { program, membership: sim.membership, simulated_ms: sim.completion_ms, closure: None })
//!     }
//! }
//!
//! // (a · b) · d on two devices: the second product reads the first through an exchange
//! let desc = |dims: &[(&str, usize)]| TensorDesc::of(dims, DType::F32).unwrap();
//! let mut comp = Computation::new();
//! let a = comp.add_input("a", desc(&[("i", 8), ("j", 6)]));
//! let b = comp.add_input("b", desc(&[("j", 6), ("k", 8)]));
//! let d = comp.add_input("d", desc(&[("k", 8), ("l", 4)]));
//! let ab = Einsum::matmul(&desc(&[("i", 8), ("j", 6)]), &desc(&[("j", 6), ("k", 8)]))?;
//! let ab = comp.add_op("ab", Box::new(ab), &[a, b])?[0];
//! let abd = Einsum::matmul(&desc(&[("i", 8), ("k", 8)]), &desc(&[("k", 8), ("l", 4)]))?;
//! let abd = comp.add_op("abd", Box::new(abd), &[ab, d])?[0];
//! comp.save(abd)?;
//! let specs: HashMap<_, _> =
//!     comp.ops().map(|(id, op, _)| (id, enumerate_specs(op, 2).unwrap()[0].spec.clone())).collect();
//!
//! let options = PhysicalOptions {
//!     devices: 2,
//!     synthesizer: Arc::new(Gather),
//!     topology: Topology::preset("dgx-a100")?,
//!     memory_budget: None,
//! };
//! let compiled = compile(&comp, &specs, &options)?;
//! assert_eq!(compiled.programs.len(), 1);
//! assert_eq!(compiled.exchanges, Exchanges::Searched); // not the built-in naive synthesizer
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The annealing's moves are values too ([`einsum_exprog::synth::Rewrite`]): a synthesizer of
//! another crate can run the search with one more rule of its own.
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::Arc;
//!
//! use einsum_compile::{PhysicalOptions, ExchangeSynthesizer, Synthesized, compile};
//! use einsum_core::{DType, TensorDesc};
//! use einsum_exprog::synth::{REWRITES, Rewrite, RewriteSite, Rewrites, SearchOptions, SynthError, search};
//! use einsum_exprog::{Preamble, Program};
//! use einsum_joinagg::{Computation, enumerate_specs};
//! use einsum_ops::einsum::Einsum;
//! use einsum_sim::Topology;
//!
//! /// Drops the body's first action: a rule the project does not have.
//! #[derive(Debug)]
//! struct DropFirst;
//!
//! impl Rewrite for DropFirst {
//!     fn name(&self) -> &str {
//!         "drop the first action"
//!     }
//!     fn weight(&self) -> usize {
//!         1
//!     }
//!     fn propose(&self, at: &mut RewriteSite<'_>) -> Option<Program> {
//!         let mut program = at.program().clone();
//!         let first = program.body.first()?.clone();
//!         program.body.remove(&first);
//!         Some(program)
//!     }
//! }
//!
//! /// The project's search with the rule added to its list.
//! #[derive(Debug)]
//! struct SearchWithDropFirst(Rewrites);
//!
//! impl ExchangeSynthesizer for SearchWithDropFirst {
//!     fn name(&self) -> &str {
//!         "search+drop-first"
//!     }
//!     fn identity(&self) -> String {
//!         format!("search+drop-first {:?}", self.0)
//!     }
//!     fn synthesize(&self, preamble: &Preamble, topology: &Topology) -> Result<Synthesized, SynthError> {
//!         let max_chunks = preamble.max_chunks();
//!         let options = SearchOptions { iterations: 30, max_chunks, rewrites: self.0, ..SearchOptions::default() };
//!         let found = search(&preamble.program, topology, options)?;
//!         Ok(Synthesized {
//!             program: found.program,
//!             membership: found.membership,
//!             simulated_ms: found.completion_ms,
//!             closure: None,
//!         })
//!     }
//!     fn invariant_under_renaming(&self) -> bool {
//!         true
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut rules: Vec<&'static dyn Rewrite> = REWRITES.to_vec();
//! rules.push(&DropFirst);
//! let synthesizer = SearchWithDropFirst(Rewrites(Vec::leak(rules)));
//!
//! // (a · b) · d on four devices, the second product reading the first through an exchange
//! let desc = |dims: &[(&str, usize)]| TensorDesc::of(dims, DType::F32).unwrap();
//! let mut comp = Computation::new();
//! let a = comp.add_input("a", desc(&[("i", 8), ("j", 8)]));
//! let b = comp.add_input("b", desc(&[("j", 8), ("k", 8)]));
//! let d = comp.add_input("d", desc(&[("k", 8), ("l", 8)]));
//! let ab = Einsum::matmul(&desc(&[("i", 8), ("j", 8)]), &desc(&[("j", 8), ("k", 8)]))?;
//! let ab = comp.add_op("ab", Box::new(ab), &[a, b])?[0];
//! let abd = Einsum::matmul(&desc(&[("i", 8), ("k", 8)]), &desc(&[("k", 8), ("l", 8)]))?;
//! let abd = comp.add_op("abd", Box::new(abd), &[ab, d])?[0];
//! comp.save(abd)?;
//! let specs: HashMap<_, _> =
//!     comp.ops().map(|(id, op, _)| (id, enumerate_specs(op, 4).unwrap()[0].spec.clone())).collect();
//! let topology = Topology::preset("dgx-v100")?;
//! let options = PhysicalOptions { devices: 4, synthesizer: Arc::new(synthesizer), topology, memory_budget: None };
//! let compiled = compile(&comp, &specs, &options)?;
//! assert_eq!(compiled.programs.len(), 1);
//! assert!(compiled.predicted_ms.is_finite());
//! #     Ok(())
//! # }
//! ```
use std::fmt;
use std::time::Duration;

use einsum_exprog::synth::{DEFAULT_SEARCH_ITERATIONS, SearchOptions, SynthError, naive_validated, search};
use einsum_exprog::{Closure, Membership, Preamble, Program};
use einsum_sim::Topology;

/// How the exchange programs of a compile are synthesized (see the module docs).
pub trait ExchangeSynthesizer: Send + Sync + fmt::Debug {
    /// Its name in reports (`naive`, `search`).
    fn name(&self) -> &str;

    /// A stable identity: equal for two synthesizers exactly when they answer every problem
    /// alike (its parameters included). Compiles that share a
    /// [`SynthesisMemo`](crate::SynthesisMemo) keep one cache of programs per identity, and a
    /// compile answers a problem asked again from its first answer: a synthesizer is expected
    /// to be deterministic.
    fn identity(&self) -> String;

    /// A body for `preamble` (its `program`: `GPUS`, `PARTITIONS`, `IN` and `OUT`, the
    /// consumer's partitions declared by size, or by members where its placement is fixed) on
    /// `topology`, with the membership it is valid under. The program may cut the atoms into
    /// chunks ([`einsum_exprog::refine`]); it is lowered against the preamble cut alike.
    fn synthesize(&self, preamble: &Preamble, topology: &Topology) -> Result<Synthesized, SynthError>;

    /// Whether its answer to a problem whose sites are renamed may be the answer to the
    /// original, renamed, wherever the topology cannot tell the renaming apart
    /// ([`einsum_exprog::Relabelling::preserves`]): then a compile synthesizes the problems
    /// equal up to a renaming once. `false` (the default): only a problem asked again exactly
    /// is answered from the cache.
    fn invariant_under_renaming(&self) -> bool {
        false
    }

    /// How many times synthesizing one program simulates it at most (1 by default), which
    /// bounds the pieces of one exchange a compile accepts
    /// ([`CompileLimits::exchange_pieces_for`](crate::footprint::CompileLimits::exchange_pieces_for)).
    fn simulations(&self) -> f64 {
        1.0
    }

    /// Whether [`compile`](crate::compile()) also compiles the plan with naive programs and
    /// keeps those when the whole plan predicts faster with them ([`crate::Exchanges`]).
    fn naive_fallback(&self) -> bool {
        false
    }

    /// Whether its programs are the naive ones ([`NaiveSynthesizer`]): a compile with them
    /// reports [`Exchanges::Naive`](crate::Exchanges::Naive), and the refinement
    /// ([`crate::refine`]) then takes its naive compiles as final.
    fn is_naive(&self) -> bool {
        false
    }
}

/// What an [`ExchangeSynthesizer`] found for one exchange problem.
#[derive(Clone, Debug)]
pub struct Synthesized {
    /// The preamble (possibly cut into chunks) with the body found.
    pub program: Program,
    /// The membership it is valid under, which places the consumer's partitions.
    pub membership: Membership,
    /// Its simulated completion time on the topology, in ms.
    pub simulated_ms: f64,
    /// Its closure under `membership`, where the synthesizer validated it already; `None`:
    /// the compile validates it.
    pub closure: Option<Closure>,
}

/// [`einsum_exprog::synth::naive`]: gather every atom where it is needed and aggregate there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NaiveSynthesizer;

impl ExchangeSynthesizer for NaiveSynthesizer {
    fn name(&self) -> &str {
        "naive"
    }

    fn identity(&self) -> String {
        "naive".to_string()
    }

    fn synthesize(&self, preamble: &Preamble, topology: &Topology) -> Result<Synthesized, SynthError> {
        let (program, validation) = naive_validated(&preamble.program)?;
        let simulated_ms =
            einsum_exprog::completion_ms(&program, &validation, topology).map_err(SynthError::Simulate)?;
        Ok(Synthesized { program, membership: validation.membership, simulated_ms, closure: Some(validation.closure) })
    }

    fn is_naive(&self) -> bool {
        true
    }
}

/// [`einsum_exprog::synth::search`] with this seed, iteration cap and wall-time budget, atoms
/// cut into chunks up to what the preamble's cells allow ([`Preamble::max_chunks`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SearchSynthesizer {
    /// The search's seed.
    pub seed: u64,
    /// Annealing iterations per exchange program (the cap).
    pub iterations: usize,
    /// Wall time each exchange program's annealing may take (`None`: the iteration cap
    /// alone). A search cut short by it depends on the machine's speed, so results
    /// are reproducible only without one.
    pub budget: Option<Duration>,
    /// Whether [`compile()`](crate::compile()) also compiles the plan with naive programs and
    /// keeps those when the whole plan predicts faster with them (see [`crate::Exchanges`]).
    /// Off, the graph runs the searched programs whatever they cost the plan: for tests of the
    /// searched programs themselves.
    pub naive_fallback: bool,
}

/// The default [`SearchSynthesizer::budget`] (`--synthesis-budget` on the command line, the
/// Python binding's `compile`): the wall time one exchange program's search may take. The
/// iteration cap ends a search first at [`DEFAULT_SEARCH_ITERATIONS`] on any machine this
/// runs on, so results stay reproducible; the budget bounds a search given a huge cap.
pub const DEFAULT_SYNTHESIS_BUDGET: Duration = Duration::from_secs(10);

impl Default for SearchSynthesizer {
    /// Seed 0, [`DEFAULT_SEARCH_ITERATIONS`], [`DEFAULT_SYNTHESIS_BUDGET`] and the naive
    /// fallback: what the command line and the Python binding search with unless told
    /// otherwise.
    fn default() -> Self {
        SearchSynthesizer {
            seed: SearchOptions::default().seed,
            iterations: DEFAULT_SEARCH_ITERATIONS,
            budget: Some(DEFAULT_SYNTHESIS_BUDGET),
            naive_fallback: true,
        }
    }
}

impl ExchangeSynthesizer for SearchSynthesizer {
    fn name(&self) -> &str {
        "search"
    }

    fn identity(&self) -> String {
        let SearchSynthesizer { seed, iterations, budget, naive_fallback } = self;
        format!("search(seed {seed}, iterations {iterations}, budget {budget:?}, naive fallback {naive_fallback})")
    }

    fn synthesize(&self, preamble: &Preamble, topology: &Topology) -> Result<Synthesized, SynthError> {
        let options = SearchOptions {
            seed: self.seed,
            iterations: self.iterations,
            time_limit: self.budget,
            max_chunks: preamble.max_chunks(),
            ..SearchOptions::default()
        };
        let found = search(&preamble.program, topology, options)?;
        Ok(Synthesized {
            program: found.program,
            membership: found.membership,
            simulated_ms: found.completion_ms,
            closure: None,
        })
    }

    /// The searched schedule's programs are as fast renamed where the topology cannot tell
    /// the renaming apart (up to the rounding of the simulation's summation order).
    fn invariant_under_renaming(&self) -> bool {
        true
    }

    /// At least once per iteration and once more for its start; with a wall-time budget, at
    /// most [`BUDGETED_SEARCH_SIMULATIONS`](crate::footprint::BUDGETED_SEARCH_SIMULATIONS)
    /// (the iterations the budget bounds).
    fn simulations(&self) -> f64 {
        let iterations = match self.budget {
            Some(_) => self.iterations.min(crate::footprint::BUDGETED_SEARCH_SIMULATIONS),
            None => self.iterations,
        };
        iterations as f64 + 1.0
    }

    fn naive_fallback(&self) -> bool {
        self.naive_fallback
    }
}
