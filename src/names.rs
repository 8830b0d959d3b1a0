//! The name tables of the edges: which of the project's strategies and cost models a name
//! on the command line or in the Python package builds, with a line on each for the help.
//!
//! The library crates below take strategies and cost models as values
//! (`Arc<dyn LogicalOptimizer>`, `Arc<dyn CostModel>`): [`CompileOptions`](crate::CompileOptions)
//! and the experiments alike. Only the command line and the Python binding read names, and
//! both read them here, so the names, their order, their help and the error an unknown one
//! gives are the same at both edges. A strategy or cost model of another crate needs no
//! entry: it is handed to `compile` or an experiment as a value.

use einsum_logical::{
    Data, Dp, Error, Greedy, Ilp, LogicalOptimizer, Machine, Megatron, Mesh2d, PaperProxy, Random, Result, Time,
    Ulysses,
};

use crate::{CostModel, Topology};

/// What a strategy of the [`optimizers`] table may be built from (what the command line
/// gives); each strategy takes what it needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OptimizerParams {
    /// Seed of the randomized strategies (`random`).
    pub seed: u64,
    /// The `ilp` strategy with its limits (by default [`Ilp::default`]'s).
    pub ilp: Ilp,
}

/// One strategy of the [`optimizers`] table: its command-line name, a one-line description,
/// whether it is a hand-designed baseline, and how to build it.
#[derive(Clone, Copy, Debug)]
pub struct OptimizerEntry {
    /// The name on the command line (and [`LogicalOptimizer::name`] of what `build` returns).
    pub name: &'static str,
    /// One line on what the strategy does.
    pub about: &'static str,
    /// A hand-designed plan of another system ([`BASELINES`]) rather than a search
    /// ([`OPTIMIZERS`]).
    pub baseline: bool,
    /// Builds the strategy.
    pub build: fn(&OptimizerParams) -> Box<dyn LogicalOptimizer>,
}

const TABLE: &[OptimizerEntry] = &[
    OptimizerEntry {
        name: "dp",
        about: "Algorithm 1 of Section 4.2 made exact on DAGs by variable elimination",
        baseline: false,
        build: |_| Box::new(Dp),
    },
    OptimizerEntry {
        name: "greedy",
        about: "each operator's cheapest spec alone, repartitions ignored",
        baseline: false,
        build: |_| Box::new(Greedy),
    },
    OptimizerEntry {
        name: "random",
        about: "a uniform random spec per operator, seeded",
        baseline: false,
        build: |p| Box::new(Random { seed: p.seed }),
    },
    OptimizerEntry {
        name: "ilp",
        about: "the exact optimum over the whole DAG, by an ILP",
        baseline: false,
        build: |p| Box::new(p.ilp),
    },
    OptimizerEntry {
        name: "data",
        about: "baseline: PyTorch-style data parallelism",
        baseline: true,
        build: |_| Box::new(Data),
    },
    OptimizerEntry {
        name: "megatron",
        about: "baseline: Megatron-LM tensor and sequence parallelism",
        baseline: true,
        build: |_| Box::new(Megatron),
    },
    OptimizerEntry {
        name: "ulysses",
        about: "baseline: DeepSpeed-Ulysses sequence parallelism",
        baseline: true,
        build: |_| Box::new(Ulysses),
    },
    OptimizerEntry {
        name: "mesh2d",
        about: "baseline: the best plan on a 2-D device mesh, as Alpa and GSPMD search",
        baseline: true,
        build: |_| Box::new(Mesh2d),
    },
];

/// The strategy `--optimizer` and the Python binding's `compile` name unless told otherwise
/// (and [`CompileOptions::default`](crate::CompileOptions)'s): the DP.
pub const DEFAULT_OPTIMIZER: &str = "dp";

/// The strategies of `einsum-logical`, by name: the one table the command line, its help,
/// the Python package and [`optimizer_by_name`] read. Searches first, then the baselines.
pub fn optimizers() -> &'static [OptimizerEntry] {
    TABLE
}

/// How many entries of the table are (or are not) baselines.
const fn count(baseline: bool) -> usize {
    let (mut i, mut n) = (0, 0);
    while i < TABLE.len() {
        if TABLE[i].baseline == baseline {
            n += 1;
        }
        i += 1;
    }
    n
}

/// The names of the table's entries that are (or are not) baselines, in its order.
const fn names<const N: usize>(baseline: bool) -> [&'static str; N] {
    let mut out = [""; N];
    let (mut i, mut j) = (0, 0);
    while i < TABLE.len() {
        if TABLE[i].baseline == baseline {
            out[j] = TABLE[i].name;
            j += 1;
        }
        i += 1;
    }
    out
}

/// The searching strategies of the [`optimizers`] table (those that are not baselines).
pub const OPTIMIZERS: &[&str] = &names::<{ count(false) }>(false);

/// The names of the baseline strategies: the entries of the [`optimizers`] table marked
/// `baseline`.
pub const BASELINES: &[&str] = &names::<{ count(true) }>(true);

/// The [`optimizers`] entry called `name`; an unknown name is an error listing the table.
pub fn optimizer_entry(name: &str) -> Result<&'static OptimizerEntry> {
    TABLE.iter().find(|e| e.name == name).ok_or_else(|| Error::UnknownName {
        what: "optimizer",
        name: name.to_string(),
        valid: TABLE.iter().map(|e| e.name).collect::<Vec<_>>().join(", "),
    })
}

/// The strategy called `name` in the [`optimizers`] table; `seed` drives `random`, and
/// `ilp` has its default limits.
pub fn optimizer_by_name(name: &str, seed: u64) -> Result<Box<dyn LogicalOptimizer>> {
    Ok((optimizer_entry(name)?.build)(&OptimizerParams { seed, ..OptimizerParams::default() }))
}

/// One cost model of the [`cost_models`] table: its command-line name, a one-line
/// description, and how to build it for a machine.
#[derive(Clone, Copy, Debug)]
pub struct CostModelEntry {
    /// The name on the command line.
    pub name: &'static str,
    /// One line on what the model prices.
    pub about: &'static str,
    /// Builds the model for the topology its predictions target (a model that prices no
    /// machine ignores it).
    pub build: fn(&Topology) -> Box<dyn CostModel>,
}

const COST_MODELS: &[CostModelEntry] = &[
    CostModelEntry {
        name: "time",
        about: "predicted seconds on the topology, load imbalance and compute included",
        build: |t| Box::new(Time::on(Machine::from_topology(t))),
    },
    CostModelEntry {
        name: "proxy",
        about: "the paper's communication proxy of Section 4.3, in elements",
        build: |_| Box::new(PaperProxy),
    },
];

/// The cost model `--cost` and the Python binding's `compile` name unless told otherwise
/// (and [`CompileOptions::default`](crate::CompileOptions)'s): the simulated time.
pub const DEFAULT_COST_MODEL: &str = "time";

/// The cost models of `einsum-logical`, by name: the one table the command line, its help,
/// the Python package and [`cost_model_by_name`] read. A model from another crate
/// implements [`CostModel`] and is handed to the driver as a value; it needs no entry here.
pub fn cost_models() -> &'static [CostModelEntry] {
    COST_MODELS
}

/// The [`cost_models`] entry called `name`; an unknown name is an error listing the table.
pub fn cost_model_entry(name: &str) -> Result<&'static CostModelEntry> {
    COST_MODELS.iter().find(|e| e.name == name).ok_or_else(|| Error::UnknownName {
        what: "cost model",
        name: name.to_string(),
        valid: COST_MODELS.iter().map(|e| e.name).collect::<Vec<_>>().join(", "),
    })
}

/// The cost model called `name` in the [`cost_models`] table, for the topology `machine`
/// (a preset name or a topology file, as [`Topology::named`] reads it).
pub fn cost_model_by_name(name: &str, machine: &str) -> Result<Box<dyn CostModel>> {
    let entry = cost_model_entry(name)?;
    let topology = Topology::named(machine).map_err(|e| Error::Topology(e.to_string()))?;
    Ok((entry.build)(&topology))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_entries_and_compile_options_default_to_them() {
        assert_eq!(optimizer_entry(DEFAULT_OPTIMIZER).unwrap().name, DEFAULT_OPTIMIZER);
        assert_eq!(cost_model_entry(DEFAULT_COST_MODEL).unwrap().name, DEFAULT_COST_MODEL);
        assert_eq!(crate::CompileOptions::default().optimizer.name(), DEFAULT_OPTIMIZER);
    }

    #[test]
    fn every_entry_builds_the_strategy_of_its_name() {
        for e in optimizers() {
            assert_eq!((e.build)(&OptimizerParams::default()).name(), e.name);
        }
        assert_eq!(OPTIMIZERS, &["dp", "greedy", "random", "ilp"]);
    }

    #[test]
    fn every_baseline_is_reachable_by_name() {
        assert_eq!(BASELINES, &["data", "megatron", "ulysses", "mesh2d"]);
        for name in BASELINES {
            assert_eq!(optimizer_by_name(name, 0).unwrap().name(), *name);
            assert!(!OPTIMIZERS.contains(name));
        }
        let err = optimizer_by_name("fsdp", 0).err().unwrap().to_string();
        assert!(err.contains("dp, greedy, random, ilp, data, megatron, ulysses, mesh2d"), "{err}");
    }

    #[test]
    fn every_cost_model_builds_the_model_of_its_name() {
        let a100 = Topology::preset("dgx-a100").unwrap();
        for e in cost_models() {
            assert_eq!((e.build)(&a100).name(), e.name);
        }
        assert!(cost_model_by_name("flops", "dgx-a100").is_err());
    }
}
