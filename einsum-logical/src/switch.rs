//! Local improvement of a plan within the memory budget: single switches, joint switches
//! of a producer and a consumer, and trades (one operator takes more memory for a cheaper
//! spec, another gives memory back), each accepted when the plan still fits and gets
//! cheaper.

use crate::Problem;
use crate::memory::within;

/// The most improvement passes over the operators and edges.
const MAX_PASSES: usize = 8;

/// `choice` (which must fit the budget), improved by bounded passes of local search: every
/// switch of one operator to another candidate, then every joint switch of a producer and
/// a consumer along an edge, then trades of two operators (see [`best_trade`]), are taken
/// when the plan stays within `budget` and its total falls; passes stop when one changes
/// nothing, or after [`MAX_PASSES`].
pub(crate) fn improve(problem: &Problem, mut choice: Vec<usize>, budget: f64) -> Vec<usize> {
    let readers = problem.readers();
    let mut edges: Vec<(usize, usize)> =
        readers.iter().enumerate().flat_map(|(p, rs)| rs.iter().map(move |&c| (p, c))).collect();
    edges.sort_unstable();
    let mut bytes = problem.resident_bytes(&choice);
    for _ in 0..MAX_PASSES {
        let mut changed = false;
        for o in 0..problem.ops.len() {
            changed |= best_switch(problem, &readers, &mut choice, &mut bytes, budget, &[o]);
        }
        for &(p, c) in &edges {
            changed |= best_switch(problem, &readers, &mut choice, &mut bytes, budget, &[p, c]);
        }
        for _ in 0..problem.ops.len() {
            if !best_trade(problem, &readers, &mut choice, &mut bytes, budget) {
                break;
            }
            changed = true;
        }
        if !changed {
            break;
        }
    }
    choice
}

/// Tries every combination of candidates of the operators `ops` (one or two), takes the
/// cheapest that fits when it lowers the total, and says whether it did.
fn best_switch(
    problem: &Problem,
    readers: &[Vec<usize>],
    choice: &mut [usize],
    bytes: &mut f64,
    budget: f64,
    ops: &[usize],
) -> bool {
    let affected = problem.affected(readers, ops);
    let before = problem.local_cost(choice, &affected);
    let original: Vec<usize> = ops.iter().map(|&o| choice[o]).collect();
    let held: f64 = ops.iter().map(|&o| problem.ops[o].candidates[choice[o]].resident_bytes).sum();
    let sizes: Vec<usize> = ops.iter().map(|&o| problem.ops[o].candidates.len()).collect();
    // (saving, candidates)
    let mut best: Option<(f64, Vec<usize>)> = None;
    let mut combo = vec![0; ops.len()];
    loop {
        if combo != original {
            let after_bytes = *bytes - held
                + ops.iter().zip(&combo).map(|(&o, &m)| problem.ops[o].candidates[m].resident_bytes).sum::<f64>();
            if within(after_bytes, budget) {
                ops.iter().zip(&combo).for_each(|(&o, &m)| choice[o] = m);
                let saving = before - problem.local_cost(choice, &affected);
                if saving > 1e-12 * before.abs() && best.as_ref().is_none_or(|(s, _)| saving > *s) {
                    best = Some((saving, combo.clone()));
                }
            }
        }
        let Some(i) = (0..combo.len()).find(|&i| combo[i] + 1 < sizes[i]) else { break };
        combo[i] += 1;
        combo[..i].iter_mut().for_each(|c| *c = 0);
    }
    match best {
        Some((_, combo)) => {
            ops.iter().zip(&combo).for_each(|(&o, &m)| choice[o] = m);
            *bytes = problem.resident_bytes(choice);
            true
        }
        None => {
            ops.iter().zip(&original).for_each(|(&o, &m)| choice[o] = m);
            false
        }
    }
}

/// One switch of one operator: `(operator, candidate, change of resident bytes, change of
/// total)`.
type Move = (usize, usize, f64, f64);

/// The best trade of two switches of different operators that fits together though one of
/// them may not alone (a cheaper spec that holds more, paid for by another operator that
/// holds less), taken when it lowers the total; says whether it did.
///
/// Switches of operators that do not read each other change the total independently, so
/// every single switch is priced once, the switches are sorted by their change of bytes,
/// and for each switch the cheapest partner within the remaining room is found by binary
/// search over prefix minima: `O(m log m)` for `m` switches. The best pair is then priced
/// exactly (it may be a producer and its reader) before it is taken.
fn best_trade(problem: &Problem, readers: &[Vec<usize>], choice: &mut [usize], bytes: &mut f64, budget: f64) -> bool {
    let room = budget * (1.0 + crate::memory::SLACK) - *bytes;
    let mut moves: Vec<Move> = Vec::new();
    for o in 0..problem.ops.len() {
        let current = choice[o];
        let held = problem.ops[o].candidates[current].resident_bytes;
        let affected = problem.affected(readers, &[o]);
        let before = problem.local_cost(choice, &affected);
        for m in (0..problem.ops[o].candidates.len()).filter(|&m| m != current) {
            choice[o] = m;
            let delta = problem.local_cost(choice, &affected) - before;
            choice[o] = current;
            moves.push((o, m, problem.ops[o].candidates[m].resident_bytes - held, delta));
        }
    }
    moves.sort_by(|a, b| a.2.total_cmp(&b.2).then(a.0.cmp(&b.0)).then(a.1.cmp(&b.1)));
    // Per prefix of `moves`: its cheapest move, and the cheapest of another operator.
    let mut prefix: Vec<(Option<usize>, Option<usize>)> = Vec::with_capacity(moves.len());
    let (mut first, mut second): (Option<usize>, Option<usize>) = (None, None);
    for (i, mv) in moves.iter().enumerate() {
        if first.is_none_or(|f| mv.3 < moves[f].3) {
            if first.is_some_and(|f| moves[f].0 != mv.0) {
                second = first;
            }
            first = Some(i);
        } else if mv.0 != first.map_or(usize::MAX, |f| moves[f].0) && second.is_none_or(|s| mv.3 < moves[s].3) {
            second = Some(i);
        }
        prefix.push((first, second));
    }
    // (estimated change of total, the two moves)
    let mut best: Option<(f64, usize, usize)> = None;
    for (a, mv) in moves.iter().enumerate() {
        // Partners whose change of bytes leaves the pair within the room.
        let end = moves.partition_point(|other| other.2 <= room - mv.2);
        let Some(&(f, s)) = end.checked_sub(1).and_then(|e| prefix.get(e)) else { continue };
        let partner = match f {
            Some(f) if moves[f].0 != mv.0 => Some(f),
            _ => s.filter(|&s| moves[s].0 != mv.0),
        };
        let Some(b) = partner else { continue };
        let estimate = mv.3 + moves[b].3;
        if estimate < 0.0 && best.is_none_or(|(e, _, _)| estimate < e) {
            best = Some((estimate, a, b));
        }
    }
    let Some((_, a, b)) = best else { return false };
    let (ma, mb) = (moves[a], moves[b]);
    let affected = problem.affected(readers, &[ma.0, mb.0]);
    let before = problem.local_cost(choice, &affected);
    let original = (choice[ma.0], choice[mb.0]);
    choice[ma.0] = ma.1;
    choice[mb.0] = mb.1;
    let after = problem.local_cost(choice, &affected);
    let after_bytes = problem.resident_bytes(choice);
    if after < before - 1e-12 * before.abs() && crate::memory::within(after_bytes, budget) {
        *bytes = after_bytes;
        true
    } else {
        choice[ma.0] = original.0;
        choice[mb.0] = original.1;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::improve;
    use crate::Problem;
    use crate::repair::tests::op;

    #[test]
    fn a_trade_moves_memory_where_it_saves_most() {
        // At [0, 0]: 100 bytes, cost 10. No single switch helps (a → 1 costs more, b → 1
        // breaks the budget); together they hold 100 bytes at cost 5.
        let ops = vec![op("a", &[(0.0, 100.0), (5.0, 0.0)]), op("b", &[(10.0, 0.0), (0.0, 100.0)])];
        let problem = Problem {
            p: 1,
            ops,
            cost_model: "toy".into(),
            unit: "units",
            inputs: Vec::new(),
            memory_budget: Some(100.0),
        };
        assert_eq!(improve(&problem, vec![0, 0], 100.0), vec![1, 1]);
        // Nothing to gain from the optimum.
        assert_eq!(improve(&problem, vec![1, 1], 100.0), vec![1, 1]);
    }
}
