//! Searched exchange programs checked against naive ones on the whole plan.
//!
//! The exchange search scores each program alone, on an otherwise idle machine. In the plan a
//! program shares links and HBM with the kernels and exchanges around it, so one that is
//! faster alone can overlap them worse, and a plan compiled with searched programs can predict
//! slower than the same plan with naive ones (seen on chain B on `dgx-a100` and on the 70B
//! stack on one `dgx-h100` node). Scoring every candidate in the plan's context would cost a
//! whole-plan simulation per candidate; comparing the two finished plans costs a naive
//! compile (two where the naive plan is kept), a fraction of the searched one. So a searched compile is never predicted slower
//! than the naive compile of the same plan.

use super::{CompileError, Compiled, ExchangeSynthesizer, NaiveSynthesizer, PhysicalOptions};

/// Which exchange programs a [`Compiled`] graph runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Exchanges {
    /// Naive ones, as asked ([`NaiveSynthesizer`]).
    Naive,
    /// Searched ones ([`crate::SearchSynthesizer`], or any synthesizer but the naive one): the
    /// whole plan predicted no slower with them (where the synthesizer asks for that check).
    Searched,
    /// Naive ones although a search was asked: the whole plan with the searched
    /// programs predicted `searched_ms`, slower than with the naive ones.
    NaiveOverSearched {
        /// The searched plan's predicted time in ms.
        searched_ms: f64,
    },
}

impl Exchanges {
    /// Its name in reports: `naive`, `searched` or `naive-over-searched`.
    pub fn name(&self) -> &'static str {
        match self {
            Exchanges::Naive => "naive",
            Exchanges::Searched => "searched",
            Exchanges::NaiveOverSearched { .. } => "naive-over-searched",
        }
    }

    /// What the plan predicted with the searched programs where naive ones were kept.
    pub fn searched_ms(&self) -> Option<f64> {
        match self {
            Exchanges::NaiveOverSearched { searched_ms } => Some(*searched_ms),
            Exchanges::Naive | Exchanges::Searched => None,
        }
    }
}

/// Compiles with `options.synthesizer` through `compile`, and with one whose
/// [`ExchangeSynthesizer::naive_fallback`] is set, also with naive programs, keeping the naive plan when it predicts
/// strictly faster. One graph is alive at a time, so the host memory is a single compile's
/// (what `footprint` estimates): the naive plan is compiled first for its time alone, and
/// compiled again (it is deterministic) only when it is kept. A naive compile that fails (its
/// transient peak over the budget where the searched one fits) leaves the searched plan; a
/// searched compile that fails is the error, as without this check. `naive_ms`, where the
/// caller already compiled the plan with naive programs, is that compile's prediction, and
/// spares the first naive compile.
pub(crate) fn no_slower_than_naive(
    options: &PhysicalOptions,
    naive_ms: Option<f64>,
    mut compile: impl FnMut(&dyn ExchangeSynthesizer) -> Result<Compiled, CompileError>,
) -> Result<Compiled, CompileError> {
    let asked = options.synthesizer.as_ref();
    if !asked.naive_fallback() {
        return compile(asked);
    }
    let naive_ms = naive_ms.or_else(|| compile(&NaiveSynthesizer).ok().map(|naive| naive.predicted_ms));
    let searched = compile(asked)?;
    match naive_ms {
        Some(naive_ms) if naive_ms < searched.predicted_ms => {
            let searched_ms = searched.predicted_ms;
            drop(searched);
            tracing::info!(
                searched_ms,
                naive_ms,
                "kept the naive exchange programs: the plan predicts faster with them"
            );
            let naive = compile(&NaiveSynthesizer)?;
            Ok(Compiled { exchanges: Exchanges::NaiveOverSearched { searched_ms }, ..naive })
        }
        _ => Ok(searched),
    }
}
