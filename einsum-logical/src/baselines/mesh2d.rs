//! `mesh2d`: the best plan on a 2-D device mesh, as Alpa and GSPMD search.

use crate::baselines::at;
use crate::{Dp, Error, LogicalOptimizer, OpProblem, Problem, Result};

/// The Alpa/GSPMD search space (Zheng et al. 2022; Xu et al. 2021): the devices form a
/// logical `a × b` mesh, and every tensor index is either replicated, split along one mesh
/// axis, or split along both; each axis shards at most one index of an operator.
///
/// For every factorisation `p = a·b` with `a ≤ b` (including `1·p`), each operator keeps
/// only the candidates that map whole indices onto the mesh: the indices split more than
/// once are exactly one with `a·b` intervals, or two with `a` and `b` intervals (each mesh
/// axis used by exactly one index). That restricted problem is solved with the exact
/// dynamic program ([`Dp`]), and the mesh whose plan costs least (under the problem's cost
/// model) wins; ties go to the mesh with the smaller `a`.
///
/// # Design
/// Restricting a cloned [`Problem`] and reusing the DP keeps this baseline's plans priced
/// and searched like the optimizer's: the only difference is the search space. On a tree
/// the DP is exact, so `mesh2d` never beats `dp` there; on a DAG both are per-tree optima
/// and either may win by a little. Mesh shapes that leave some operator without a
/// candidate are skipped; when every shape does, the error names the operator.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mesh2d;

impl Mesh2d {
    /// The mesh shapes `(a, b)` with `a ≤ b` and `a·b = p`, by increasing `a`.
    pub fn meshes(p: usize) -> Vec<(usize, usize)> {
        (1..=p).take_while(|a| a * a <= p).filter(|a| p.is_multiple_of(*a)).map(|a| (a, p / a)).collect()
    }

    /// True when the interval counts `counts` map whole indices onto the mesh `(a, b)`:
    /// the counts above one are `[a·b]` or, with `a > 1`, `{a, b}` (any order); with
    /// `a·b = 1`, none.
    pub fn fits(counts: &[usize], mesh: (usize, usize)) -> bool {
        let (a, b) = mesh;
        let mut split: Vec<usize> = counts.iter().copied().filter(|&c| c > 1).collect();
        split.sort_unstable();
        match split.as_slice() {
            [] => a * b == 1,
            [whole] => *whole == a * b && a * b > 1,
            [x, y] => a > 1 && (*x, *y) == (a, b),
            _ => false,
        }
    }

    /// The chosen candidate of every operator, the mesh it was planned on, and its total
    /// cost under the problem's cost model.
    pub fn solve_with_mesh(&self, problem: &Problem) -> Result<(Vec<usize>, (usize, usize), f64)> {
        let mut best: Option<(Vec<usize>, (usize, usize), f64)> = None;
        let mut unplaceable: Option<&OpProblem> = None;
        for mesh in Self::meshes(problem.p) {
            let kept: Vec<Vec<usize>> = problem
                .ops
                .iter()
                .map(|op| {
                    (0..op.candidates.len())
                        .filter(|&n| op.candidates[n].all_counts().any(|c| Self::fits(c, mesh)))
                        .collect()
                })
                .collect();
            if let Some(c) = kept.iter().position(Vec::is_empty) {
                unplaceable.get_or_insert(&problem.ops[c]);
                continue;
            }
            let restricted = Problem {
                ops: problem
                    .ops
                    .iter()
                    .zip(&kept)
                    .map(|(op, keep)| OpProblem {
                        candidates: keep.iter().map(|&n| op.candidates[n].clone()).collect(),
                        ..op.clone()
                    })
                    .collect(),
                // The mesh rule ignores memory: its plan is refused, not changed, when over
                // the budget (see `LogicalOptimizer::plan`).
                memory_budget: None,
                ..problem.clone()
            };
            let sub = Dp.solve(&restricted)?;
            let choice: Vec<usize> = sub.iter().zip(&kept).map(|(&n, keep)| keep[n]).collect();
            let total = problem.total(&choice)?;
            if best.as_ref().is_none_or(|(_, _, t)| total < *t) {
                best = Some((choice, mesh, total));
            }
        }
        best.ok_or_else(|| Error::Baseline {
            strategy: "mesh2d",
            at: unplaceable.map_or_else(|| "the graph".to_string(), at),
            reason: format!(
                "no spec on {} devices maps whole indices onto any 2-D mesh ({})",
                problem.p,
                Self::meshes(problem.p).iter().map(|(a, b)| format!("{a}×{b}")).collect::<Vec<_>>().join(", ")
            ),
        })
    }
}

impl LogicalOptimizer for Mesh2d {
    fn name(&self) -> &str {
        "mesh2d"
    }

    fn solve(&self, problem: &Problem) -> Result<Vec<usize>> {
        Ok(self.solve_with_mesh(problem)?.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meshes_of_small_device_counts() {
        assert_eq!(Mesh2d::meshes(1), vec![(1, 1)]);
        assert_eq!(Mesh2d::meshes(4), vec![(1, 4), (2, 2)]);
        assert_eq!(Mesh2d::meshes(8), vec![(1, 8), (2, 4)]);
        assert_eq!(Mesh2d::meshes(12), vec![(1, 12), (2, 6), (3, 4)]);
        assert_eq!(Mesh2d::meshes(7), vec![(1, 7)]);
    }

    #[test]
    fn whole_indices_fit_the_mesh() {
        assert!(Mesh2d::fits(&[8, 1, 1], (2, 4)));
        assert!(Mesh2d::fits(&[4, 1, 2], (2, 4)));
        assert!(Mesh2d::fits(&[2, 4], (2, 4)));
        assert!(!Mesh2d::fits(&[2, 2, 2], (2, 4)));
        assert!(!Mesh2d::fits(&[2, 4], (1, 8)));
        assert!(Mesh2d::fits(&[1, 8], (1, 8)));
        assert!(Mesh2d::fits(&[2, 2], (2, 2)));
        assert!(!Mesh2d::fits(&[3, 4], (2, 6)));
        assert!(Mesh2d::fits(&[1, 1], (1, 1)));
        assert!(!Mesh2d::fits(&[2], (1, 1)));
    }
}
