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
            tracing::debug!(op = %self.ops[o].name, from = choice[o], to = m, "repair: a candidate with fewer resident bytes");
            choice[o] = m;
        }
        choice
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::{Candidate, OpProblem, Problem, Source, SpecCost, TilingId};
    use einsum_joinagg::{JoinAggSpec, OpId};

    /// An operator reading one computation input, with candidates `(cost, resident bytes)`
    /// that all produce and need the same tilings.
    pub(crate) fn op(name: &str, cands: &[(f64, f64)]) -> OpProblem {
        OpProblem {
            id: OpId(0),
            name: name.into(),
            kind: "toy".into(),
            op_role: None,
            shardable: Vec::new(),
            roles: Vec::new(),
            max_parts: Vec::new(),
            output_dims: Vec::new(),
            sources: vec![Source::Input { input: 0 }],
            repartition: vec![0.0],
            repartition_pairs: Vec::new(),
            input_bytes: vec![0.0],
            consumers: vec![Vec::new()],
            candidates: cands
                .iter()
                .map(|&(cost, resident_bytes)| Candidate {
                    counts: Vec::new(),
                    aliases: Vec::new(),
                    spec: JoinAggSpec { functions: Vec::new() },
                    outputs: vec![TilingId(1)],
                    inputs: vec![TilingId(0)],
                    cost: SpecCost { join: cost, aggregation: 0.0, compute: 0.0 },
                    bytes: 0.0,
                    resident_bytes,
                })
                .collect(),
        }
    }

    fn problem(budget: Option<f64>) -> Problem {
        // a: shedding 100 bytes costs 10 (0.1 a byte); b: shedding 50 costs 1 (0.02 a byte),
        // shedding 100 costs 30 (0.3 a byte).
        let ops = vec![op("a", &[(0.0, 100.0), (10.0, 0.0)]), op("b", &[(0.0, 100.0), (1.0, 50.0), (30.0, 0.0)])];
        Problem { p: 1, ops, cost_model: "toy".into(), unit: "units", inputs: Vec::new(), memory_budget: budget }
    }

    #[test]
    fn repair_takes_the_cheapest_bytes_first() {
        assert_eq!(problem(None).repair(&[0, 0]), vec![0, 0]);
        assert_eq!(problem(Some(200.0)).repair(&[0, 0]), vec![0, 0]);
        // 50 bytes over: b's first step, at 0.02 a byte.
        assert_eq!(problem(Some(150.0)).repair(&[0, 0]), vec![0, 1]);
        // 100 over: b's first step (0.02), then a (0.1) rather than b's second (0.58).
        assert_eq!(problem(Some(100.0)).repair(&[0, 0]), vec![1, 1]);
        // Down to the least plan, which holds nothing.
        assert_eq!(problem(Some(1.0)).min_resident_choice(), vec![1, 2]);
        assert_eq!(problem(Some(1.0)).repair(&[0, 0]), vec![1, 2]);
        // A choice that is not a full assignment is left alone.
        assert_eq!(problem(Some(1.0)).repair(&[0]), vec![0]);
    }
}
