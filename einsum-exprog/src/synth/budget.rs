//! The search's wall-clock budget ([`super::SearchOptions::time_limit`]), and the move lists
//! that give up when it is over.

use std::time::{Duration, Instant};

/// How many items of a move list, or pairs behind it, are formed between two looks at the
/// clock ([`within`]).
pub(super) const CHECK_EVERY: usize = 1 << 16;

/// `items`, ending once `budget` is over (looked at every [`CHECK_EVERY`] items), with `cut`
/// set then. The lists of pairs a move draws from grow with the square of one site's actions
/// (seconds to list at a few thousand), so a step must be able to give up inside one for the
/// search to keep its budget; without a limit the items are all of them.
pub(super) fn within<'a, T: 'a>(
    items: impl Iterator<Item = T> + 'a,
    budget: Budget,
    cut: &'a mut bool,
) -> impl Iterator<Item = T> + 'a {
    items
        .enumerate()
        .take_while(move |(n, _)| {
            let over = n % CHECK_EVERY == CHECK_EVERY - 1 && budget.over();
            *cut |= over;
            !over
        })
        .map(|(_, item)| item)
}

/// The search's wall-time budget ([`super::SearchOptions::time_limit`]): the clock started with the
/// search, and the longest step seen, whose room is kept.
#[derive(Clone, Copy, Debug)]
pub(super) struct Budget {
    pub(super) clock: Instant,
    pub(super) limit: Option<Duration>,
    pub(super) step: Duration,
}

impl Budget {
    /// Whether the next step would cross the limit: the time spent and the longest step so
    /// far reach it.
    pub(super) fn spent(&self) -> bool {
        self.limit.is_some_and(|limit| self.clock.elapsed() + self.step >= limit)
    }

    /// Whether the limit has passed: a step in progress gives up.
    pub(super) fn over(&self) -> bool {
        self.limit.is_some_and(|limit| self.clock.elapsed() >= limit)
    }

    /// A step that began at `since` has ended.
    pub(super) fn record(&mut self, since: Instant) {
        self.step = self.step.max(since.elapsed());
    }
}
