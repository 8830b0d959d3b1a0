//! [`Strategy`]: a logical strategy as the experiments plan with it, a value with a label.

use std::hash::{Hash, Hasher};
use std::{fmt, sync::Arc};

use einsum_compile::PipelineError;
use einsum_compile::pipeline::Planned;
use einsum_graph::Snapshot;
use einsum_joinagg::Computation;
use einsum_logical::{Data, Dp, Greedy, LogicalOptimizer, Megatron, Mesh2d, Random, Ulysses};

/// Planning a graph in its other forms too, the fastest predicted kept: what makes a strategy
/// the joint optimizer of a computation's form and its decomposition (the driver's algebraic
/// rewrites, `einsummable::rewrite`). A value, so that this crate knows nothing of the
/// rewrites; the paper's columns plan the graphs as written.
pub trait Forms: Send + Sync {
    /// The plan of the fastest form of `graph`, each form planned with `plan` (the
    /// experiment's pipeline), and the form planned; why not where the written graph has
    /// no plan.
    fn fastest(
        &self,
        graph: &Snapshot,
        plan: &(dyn Fn(&Computation) -> Result<Planned, PipelineError> + Sync),
    ) -> Result<(Planned, Snapshot), String>;
}

/// A strategy an experiment plans its cases with: any [`LogicalOptimizer`] value, this
/// project's or a user's, and the label that tells it apart in progress lines and in the
/// [`Runner`](super::Runner)'s cache (by default its [`name`](LogicalOptimizer::name), which
/// also heads its column in the tables). Two strategies with the same label are taken to
/// plan alike: give differently configured values of one strategy distinct labels, as
/// [`Strategy::random`] does with its seed.
///
/// The constructors [`dp`](Self::dp), [`greedy`](Self::greedy), [`random`](Self::random)
/// and the baselines' build this project's strategies; a user's strategy enters an
/// experiment through [`Strategy::new`] and [`Setup::with_strategy`](super::Setup::with_strategy).
#[derive(Clone)]
pub struct Strategy {
    optimizer: Arc<dyn LogicalOptimizer>,
    label: String,
    /// Its column's name: the optimizer's, or the joint optimizer's own.
    name: String,
    /// The forms it weighs, where it is a joint optimizer ([`Strategy::with_forms`]).
    forms: Option<Arc<dyn Forms>>,
}

impl Strategy {
    /// The strategy `optimizer`, labelled by its name.
    pub fn new(optimizer: Arc<dyn LogicalOptimizer>) -> Self {
        let label = optimizer.name().to_string();
        Strategy { name: label.clone(), optimizer, label, forms: None }
    }

    /// The strategy `optimizer` with its own label (for two configurations of one strategy).
    pub fn labelled(optimizer: Arc<dyn LogicalOptimizer>, label: impl Into<String>) -> Self {
        let name = optimizer.name().to_string();
        Strategy { optimizer, label: label.into(), name, forms: None }
    }

    /// The default strategy: the DP ([`Dp`]).
    pub fn dp() -> Self {
        Self::new(Arc::new(Dp))
    }

    /// Each operator's cheapest spec alone ([`Greedy`]).
    pub fn greedy() -> Self {
        Self::new(Arc::new(Greedy))
    }

    /// A uniform random spec per operator drawn with `seed` ([`Random`]), labelled
    /// `random seed N`.
    pub fn random(seed: u64) -> Self {
        Self::labelled(Arc::new(Random { seed }), format!("random seed {seed}"))
    }

    /// The data-parallel baseline ([`Data`]).
    pub fn data() -> Self {
        Self::new(Arc::new(Data))
    }

    /// The Megatron-LM baseline ([`Megatron`]).
    pub fn megatron() -> Self {
        Self::new(Arc::new(Megatron))
    }

    /// The DeepSpeed-Ulysses baseline ([`Ulysses`]).
    pub fn ulysses() -> Self {
        Self::new(Arc::new(Ulysses))
    }

    /// The 2-D mesh baseline ([`Mesh2d`]).
    pub fn mesh2d() -> Self {
        Self::new(Arc::new(Mesh2d))
    }

    /// The same strategy planning each graph in the forms `forms` weighs too, the fastest
    /// kept: the joint optimizer, named and labelled `name` (`dp+rewrites`).
    pub fn with_forms(self, forms: Arc<dyn Forms>, name: impl Into<String>) -> Self {
        let name = name.into();
        Strategy { label: name.clone(), name, forms: Some(forms), ..self }
    }

    /// The forms it weighs, where it is a joint optimizer.
    pub fn forms(&self) -> Option<&dyn Forms> {
        self.forms.as_deref()
    }

    /// The strategy's name ([`LogicalOptimizer::name`], or a joint optimizer's own): its
    /// column in the tables.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The label that tells it apart from other values of the same strategy.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The strategy itself.
    pub fn optimizer(&self) -> &dyn LogicalOptimizer {
        self.optimizer.as_ref()
    }
}

impl fmt::Debug for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label)
    }
}

impl PartialEq for Strategy {
    fn eq(&self, other: &Self) -> bool {
        self.label == other.label
    }
}

impl Eq for Strategy {}

impl Hash for Strategy {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.label.hash(state);
    }
}
