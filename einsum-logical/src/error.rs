//! Errors of the logical optimizer.

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every way optimizing can fail; messages say what and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// Enumerating or validating an operator's specs failed (for example, no spec for `p`).
    #[error(transparent)]
    JoinAgg(#[from] einsum_joinagg::Error),
    /// An unknown optimizer, cost model or machine name.
    #[error("unknown {what} `{name}`; valid: {valid}")]
    UnknownName {
        /// What kind of name (optimizer, cost model, machine).
        what: &'static str,
        /// The name given.
        name: String,
        /// The valid names.
        valid: String,
    },
    /// A topology that cannot be loaded (unknown preset, bad file).
    #[error("topology: {0}")]
    Topology(String),
    /// A device count of zero.
    #[error("the device count must be at least 1, got {0}")]
    NoDevices(usize),
    /// A plan that does not fit its problem (wrong length, a choice out of range).
    #[error("invalid plan: {0}")]
    InvalidPlan(String),
    /// A hand-designed baseline whose rule cannot be expressed on this graph or operator
    /// (e.g. `ulysses` on a graph without attention).
    #[error("the {strategy} baseline cannot plan {at}: {reason}")]
    Baseline {
        /// The baseline's name.
        strategy: &'static str,
        /// Where: `the graph`, or the operator (`operator `einsum #3` (einsum)`).
        at: String,
        /// Why.
        reason: String,
    },
    /// The ILP solver failed.
    #[error("ILP solver: {0}")]
    Solver(String),
    /// The ILP solver reached its time limit or node cap
    /// ([`Ilp::time_limit`](crate::Ilp::time_limit), [`Ilp::node_limit`](crate::Ilp::node_limit))
    /// before proving the optimum; the strategy returns no plan rather than one it cannot
    /// vouch for.
    #[error(
        "ILP solver ({solver}): stopped at its {limit} before proving the optimum (the ilp strategy returns only \
         proven optima); raise its limits (`--ilp-time-limit`, `--ilp-node-limit`), or use the dp strategy, which is \
         exact too (variable elimination) and takes milliseconds"
    )]
    SolverLimit {
        /// The solver: `microlp` or `HiGHS`.
        solver: &'static str,
        /// Which limit, with its value (`time limit of 60 s`, `cap of 100000 branch-and-bound nodes`).
        limit: String,
    },
    /// Even the plan with the least resident memory
    /// ([`Problem::min_resident_bytes`](crate::Problem::min_resident_bytes)) needs more bytes
    /// per device than the budget (the driver adds the transient memory of the compiled
    /// task graph to `need` when that is what does not fit).
    #[error(
        "the computation does not fit: the plan needing the least memory needs {} per device on {devices} devices, \
         over the budget of {} per device; at least {min_devices} devices of this memory would be needed",
        format_gb(*need),
        format_gb(*budget)
    )]
    DoesNotFit {
        /// The least bytes per device over every plan: its resident inputs (and, from the
        /// driver, its transient peak).
        need: f64,
        /// The budget, in bytes per device.
        budget: f64,
        /// The device count planned for.
        devices: usize,
        /// A lower bound on the device count this budget needs: the smallest count over
        /// which the computation inputs, split evenly, fit (`⌈total / budget⌉`), and more
        /// than `devices`.
        min_devices: usize,
    },
    /// A strategy (a hand-designed baseline) chose a plan whose resident inputs exceed the
    /// budget. The bound is the same on every device (placement is chosen later), so
    /// `device` is 0.
    #[error("the `{strategy}` plan needs {} of resident inputs on device {device}, over its budget of {}", format_gb(*need), format_gb(*budget))]
    OverBudget {
        /// The strategy's name.
        strategy: String,
        /// The device (0: the bound holds for every device).
        device: usize,
        /// The plan's resident bytes per device.
        need: f64,
        /// The budget, in bytes per device.
        budget: f64,
    },
    /// A memory budget that is not a finite positive number of bytes.
    #[error("the memory budget must be a finite positive number of bytes per device, got {0}")]
    InvalidBudget(f64),
}

/// Bytes as gigabytes (10⁹ bytes) with two decimals: `17.41 GB`.
pub fn format_gb(bytes: f64) -> String {
    format!("{:.2} GB", bytes / 1e9)
}
