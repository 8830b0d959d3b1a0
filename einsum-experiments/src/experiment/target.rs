//! [`Target`]: a machine an experiment plans for, with the cost model its strategies plan
//! under there; [`CostModels`] builds that model for each machine.

use std::hash::{Hash, Hasher};
use std::{fmt, sync::Arc};

use einsum_logical::{CostModel, Machine, Time};
use einsum_sim::Topology;

use crate::Result;

/// The cost model the strategies plan under on a machine, built for each machine an
/// experiment targets (the fixed-machine experiments choose their own). By default
/// [`CostModels::time`]; a user's model enters through [`CostModels::new`] and
/// [`Setup::with_cost`](super::Setup::with_cost).
#[derive(Clone)]
pub struct CostModels(Arc<BuildCost>);

/// How [`CostModels`] builds the model for a machine.
type BuildCost = dyn Fn(&Topology) -> Arc<dyn CostModel> + Send + Sync;

impl CostModels {
    /// The models `build` makes for each topology.
    pub fn new(build: impl Fn(&Topology) -> Arc<dyn CostModel> + Send + Sync + 'static) -> Self {
        CostModels(Arc::new(build))
    }

    /// The default: [`Time`], predicted seconds on the machine.
    pub fn time() -> Self {
        Self::new(|t| Arc::new(Time::on(Machine::from_topology(t))))
    }

    /// The target `topology`, called `name` in the tables, priced by this model.
    pub fn target(&self, name: impl Into<String>, topology: Topology) -> Target {
        let cost = (self.0)(&topology);
        Target { name: name.into(), topology: Arc::new(topology), cost }
    }

    /// The target a topology preset or file names ([`Topology::named`]), called by that name.
    pub fn named(&self, name: &str) -> Result<Target> {
        Ok(self.target(name, Topology::named(name)?))
    }

    /// The target of a topology preset the experiments fix (`dgx-a100`, ...): the presets
    /// ship with `einsum-sim`.
    pub(crate) fn preset(&self, name: &str) -> Target {
        self.named(name).unwrap_or_else(|e| panic!("the experiments' preset `{name}`: {e}"))
    }
}

impl Default for CostModels {
    fn default() -> Self {
        Self::time()
    }
}

impl fmt::Debug for CostModels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CostModels")
    }
}

/// A machine a case is planned and compiled for: its topology, the name the tables and
/// captions give it (a preset's name, or a file's path as given), and the cost model the
/// strategies plan under on it. Two targets are alike when their names and their models'
/// names are.
#[derive(Clone)]
pub struct Target {
    name: String,
    topology: Arc<Topology>,
    cost: Arc<dyn CostModel>,
}

impl Target {
    /// The target `topology`, called `name`, priced by `cost`.
    pub fn new(name: impl Into<String>, topology: Topology, cost: Arc<dyn CostModel>) -> Self {
        Target { name: name.into(), topology: Arc::new(topology), cost }
    }

    /// Its name in the tables.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The machine.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The cost model the strategies plan under.
    pub fn cost(&self) -> &dyn CostModel {
        self.cost.as_ref()
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.cost.name())
    }
}

impl PartialEq for Target {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.cost.name() == other.cost.name()
    }
}

impl Eq for Target {}

impl Hash for Target {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
        self.cost.name().hash(state);
    }
}
