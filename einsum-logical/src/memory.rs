//! The memory model: computation inputs (weights) stay resident, for the executable's
//! lifetime, on every device whose function spec reads them, in the blocks it reads; a
//! plan must keep them within a per-device budget.
//!
//! Every candidate has exactly `p` function specs, which the physical compiler places on
//! the `p` devices as a bijection it chooses later. The logical optimizer therefore cannot
//! tell which device holds which block, and bounds every device at once: an operator keeps
//! at most its [`Candidate::resident_bytes`](crate::Candidate::resident_bytes) (its largest
//! function spec's computation-input blocks) on any one device, and a plan at most the sum
//! of those over its operators ([`Problem::resident_bytes`]). The bound is additive over
//! operators, which is what lets the DP price memory with a Lagrange multiplier and the ILP
//! take it as one linear constraint.

use std::collections::BTreeSet;

use crate::{Error, Problem, Result, Source};

/// Relative slack of every budget comparison, so that rounding (sums taken in different
/// orders, the ILP solver's tolerances) never decides whether a plan fits.
pub(crate) const SLACK: f64 = 1e-9;

/// True when `bytes` are within `budget` (up to [`SLACK`]).
pub(crate) fn within(bytes: f64, budget: f64) -> bool {
    bytes <= budget * (1.0 + SLACK)
}

impl Problem {
    /// The same problem, planned within `budget` bytes per device for resident computation
    /// inputs (`None`: unlimited, the default). A budget that is not finite and positive is
    /// [`Error::InvalidBudget`].
    pub fn with_memory_budget(mut self, budget: Option<f64>) -> Result<Problem> {
        if let Some(b) = budget
            && (!b.is_finite() || b <= 0.0)
        {
            return Err(Error::InvalidBudget(b));
        }
        self.memory_budget = budget;
        Ok(self)
    }

    /// The per-device bound on resident bytes of a full assignment: the sum over operators
    /// of the chosen candidate's [`resident_bytes`](crate::Candidate::resident_bytes).
    ///
    /// It is exact (every device holds exactly this much) when every function spec of every
    /// chosen candidate reads equal-size blocks and no computation input is read by two
    /// operators. Otherwise it is an upper bound: placement is chosen later, and a device
    /// may end up holding the largest block of every operator; an input read by two
    /// operators is counted once per reader. A candidate an operator does not have counts
    /// zero (a full assignment is checked where it is priced).
    pub fn resident_bytes(&self, choice: &[usize]) -> f64 {
        self.ops.iter().zip(choice).map(|(op, &n)| op.candidates.get(n).map_or(0.0, |c| c.resident_bytes)).sum()
    }

    /// The least [`resident_bytes`](Self::resident_bytes) over every plan: the sum over
    /// operators of their smallest candidate's (the bound is additive, so this is its exact
    /// minimum). Equals `resident_bytes(&min_resident_choice())`.
    pub fn min_resident_bytes(&self) -> f64 {
        self.resident_bytes(&self.min_resident_choice())
    }

    /// A plan with the least [`resident_bytes`](Self::resident_bytes): per operator, the
    /// candidate with the fewest resident bytes, ties to the cheapest tiling-independent
    /// cost, then the lowest index (0 for an operator without candidates).
    pub fn min_resident_choice(&self) -> Vec<usize> {
        self.ops
            .iter()
            .map(|op| {
                (0..op.candidates.len())
                    .min_by(|&a, &b| {
                        let (x, y) = (&op.candidates[a], &op.candidates[b]);
                        x.resident_bytes.total_cmp(&y.resident_bytes).then(x.cost.total().total_cmp(&y.cost.total()))
                    })
                    .unwrap_or(0)
            })
            .collect()
    }

    /// The bytes of every computation input, whole.
    pub fn input_bytes_total(&self) -> f64 {
        self.inputs.iter().map(|i| i.bytes).sum()
    }

    /// True when the plan `choice` keeps its resident inputs within the budget (always,
    /// without one). Comparisons allow a relative slack of 1e-9 for rounding.
    pub fn fits(&self, choice: &[usize]) -> bool {
        self.memory_budget.is_none_or(|b| within(self.resident_bytes(choice), b))
    }

    /// [`Error::OverBudget`], naming `strategy`, when the plan `choice` does not
    /// [`fit`](Self::fits).
    pub fn check_budget(&self, choice: &[usize], strategy: &str) -> Result<()> {
        self.check(choice)?;
        match self.memory_budget {
            Some(budget) if !self.fits(choice) => Err(Error::OverBudget {
                strategy: strategy.to_string(),
                device: 0,
                need: self.resident_bytes(choice),
                budget,
            }),
            _ => Ok(()),
        }
    }

    /// [`Error::DoesNotFit`] when even the plan with the least resident memory exceeds the
    /// budget, so that no strategy can plan within it; `Ok` without a budget.
    pub fn check_min_fits(&self) -> Result<()> {
        let Some(budget) = self.memory_budget else { return Ok(()) };
        let need = self.min_resident_bytes();
        if within(need, budget) {
            return Ok(());
        }
        // The inputs split evenly over p' devices need total / p' per device.
        let even = (self.input_bytes_total() / budget).ceil() as usize;
        Err(Error::DoesNotFit { need, budget, devices: self.p, min_devices: even.max(self.p + 1) })
    }

    /// Per operator, the distinct operators that read one of its outputs.
    pub(crate) fn readers(&self) -> Vec<Vec<usize>> {
        let mut readers: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); self.ops.len()];
        for (c, op) in self.ops.iter().enumerate() {
            for src in &op.sources {
                if let Source::Op { op: p, .. } = *src {
                    readers[p].insert(c);
                }
            }
        }
        readers.into_iter().map(|r| r.into_iter().collect()).collect()
    }

    /// The operators whose cost depends on the choice of the operators `changed`: those and
    /// their readers, sorted and distinct.
    pub(crate) fn affected(&self, readers: &[Vec<usize>], changed: &[usize]) -> Vec<usize> {
        let set: BTreeSet<usize> =
            changed.iter().flat_map(|&o| std::iter::once(o).chain(readers[o].iter().copied())).collect();
        set.into_iter().collect()
    }

    /// The part of [`total`](Self::total) that the operators `ops` contribute: each one's
    /// tiling-independent cost plus the repartitions of its inputs.
    pub(crate) fn local_cost(&self, choice: &[usize], ops: &[usize]) -> f64 {
        ops.iter()
            .map(|&c| {
                let op = &self.ops[c];
                let moved: f64 = (0..op.sources.len()).map(|k| self.edge_repartition(choice, c, k)).sum();
                op.candidates[choice[c]].cost.total() + moved
            })
            .sum()
    }
}
