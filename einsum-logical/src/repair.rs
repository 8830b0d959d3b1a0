//! Repair: bringing a plan within the memory budget by cheap switches.

use crate::Problem;
use crate::memory::within;

impl Problem {
    /// `choice`, changed until it fits the memory budget: while it is over, the operator
    /// whose switch to a candidate with fewer resident bytes costs the least per byte saved
    /// (cost increase of that operator and its readers, repartitions included, divided by
    /// the bytes saved; a switch that also saves cost is taken first) is switched. Ties go
    /// to the earliest operator and candidate.
    ///
    /// Every switch strictly lowers the plan's resident bytes, so each operator switches at
    /// most once per candidate it has and the loop ends. When
    /// [`min_resident_bytes`](Self::min_resident_bytes) fits, a plan over budget always has
    /// an operator above its least candidate, so the result fits. Without a budget, or for a
    /// `choice` that is not a full assignment, `choice` is returned unchanged.
    pub fn repair(&self, choice: &[usize]) -> Vec<usize> {
        let mut choice = choice.to_vec();
        let Some(budget) = self.memory_budget else { return choice };
        if self.check(&choice).is_err() {
            return choice;
        }
        let readers = self.readers();
        while !within(self.resident_bytes(&choice), budget) {
            // (cost per byte saved, operator, candidate)
            let mut best: Option<(f64, usize, usize)> = None;
            for o in 0..self.ops.len() {
                let current = choice[o];
                let held = self.ops[o].candidates[current].resident_bytes;
                let affected = self.affected(&readers, &[o]);
                let before = self.local_cost(&choice, &affected);
                for m in 0..self.ops[o].candidates.len() {
                    let saved = held - self.ops[o].candidates[m].resident_bytes;
                    if saved <= 0.0 {
                        continue;
                    }
                    choice[o] = m;
                    let rate = (self.local_cost(&choice, &affected) - before) / saved;
                    choice[o] = current;
                    if best.is_none_or(|(b, _, _)| rate < b) {
                        best = Some((rate, o, m));
                    }
                }
            }
            let Some((_, o, m)) = best else { break };
            choice[o] = m;
        }
        choice
    }
}
