//! The aggregation ⊕ of Definition 3.7.

use std::fmt;

use crate::{Interval, TensorType};

/// A binary, associative and commutative operation that combines the partial outputs of
/// function specs sharing one output box: elementwise for `Sum`, `Max`, `Min` and
/// `Product`, row-wise for [`Aggregation::Softmax`] (see [`Aggregation::is_elementwise`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Aggregation {
    /// `a + b` (contractions, sums).
    #[default]
    Sum,
    /// `max(a, b)`, as NumPy's `maximum`: NaN where either is NaN.
    Max,
    /// `min(a, b)`, as NumPy's `minimum`: NaN where either is NaN.
    Min,
    /// `a · b`.
    Product,
    /// Softmax-weighted averages over disjoint key sets, combined as flash-decoding does.
    /// Not elementwise: a partial block of an operator with this aggregation, when its box
    /// is shared by more than one function spec, is the output box with its last index one
    /// wider ([`Aggregation::partial_type`]): each row holds the values `o` (normalized:
    /// `o = Σ softmax-weights · v` over the keys the function saw) followed by one
    /// statistics column, the log-sum-exp `lse` of the row's scores over those keys (`−∞`,
    /// with `o = 0`, when the function saw no key). Two partial rows combine as in
    /// [`merge_softmax_rows`]; the final output is the aggregated partial without its
    /// statistics column. A box produced by one function spec alone is not widened: it is
    /// the final output already.
    Softmax,
}

impl Aggregation {
    /// Applies ⊕ to two scalars, with IEEE semantics as NumPy's `add`, `maximum`, `minimum`
    /// and `multiply`: a NaN on either side gives NaN (for `Max` and `Min` too, where
    /// `f32::max` and `f32::min` would return the other operand, so a partial maximum that
    /// is NaN would vanish in the combination), `∞ + (−∞)` and `0 · ∞` are NaN. `Max` and
    /// `Min` return `a` where `a` is NaN or wins or ties (`max(-0, +0)` is `-0`), else `b`.
    ///
    /// # Panics
    /// For [`Aggregation::Softmax`], which is not elementwise (its rows combine with
    /// [`merge_softmax_rows`]); callers that only know elementwise ⊕ check
    /// [`Aggregation::is_elementwise`] first and refuse it with a typed error.
    pub fn apply(self, a: f32, b: f32) -> f32 {
        match self {
            Aggregation::Sum => a + b,
            Aggregation::Max => {
                if a >= b || a.is_nan() {
                    a
                } else {
                    b
                }
            }
            Aggregation::Min => {
                if a <= b || a.is_nan() {
                    a
                } else {
                    b
                }
            }
            Aggregation::Product => a * b,
            Aggregation::Softmax => {
                panic!("the softmax aggregation is row-wise, not elementwise: use merge_softmax_rows")
            }
        }
    }

    /// The neutral element: `x ⊕ identity = x`.
    ///
    /// # Panics
    /// For [`Aggregation::Softmax`], whose neutral element is a row (`o = 0`, `lse = −∞`),
    /// not a scalar.
    pub fn identity(self) -> f32 {
        match self {
            Aggregation::Sum => 0.0,
            Aggregation::Max => f32::NEG_INFINITY,
            Aggregation::Min => f32::INFINITY,
            Aggregation::Product => 1.0,
            Aggregation::Softmax => panic!("the softmax aggregation's identity is a row (o = 0, lse = -inf)"),
        }
    }

    /// True for the elementwise aggregations ([`apply`](Self::apply) and
    /// [`identity`](Self::identity) are defined), false for [`Aggregation::Softmax`].
    pub fn is_elementwise(self) -> bool {
        !matches!(self, Aggregation::Softmax)
    }

    /// True when a partial block of box `block` carries a statistics column: the
    /// aggregation is [`Aggregation::Softmax`], the box is `shared` by more than one
    /// function spec (a box one function spec produces alone is final), and it has an index
    /// to widen.
    pub fn widens(self, block: &TensorType, shared: bool) -> bool {
        self == Aggregation::Softmax && shared && block.rank() > 0
    }

    /// Floating-point operations of combining `pieces` partial blocks of type `ty` (a
    /// partial's type, the statistics column included): one per element and step for the
    /// elementwise aggregations; for [`Aggregation::Softmax`], per step, 3 per value (two
    /// products and a sum) and [`SOFTMAX_ROW_FLOPS`] per row (its maximum, four
    /// exponentials and a logarithm).
    pub fn flops(self, pieces: usize, ty: &TensorType) -> f64 {
        let steps = pieces.saturating_sub(1) as f64;
        let elements = ty.volume() as f64;
        match (self, ty.rank().checked_sub(1)) {
            (Aggregation::Softmax, Some(last)) if !ty.dim(last).is_empty() => {
                let rows = elements / ty.dim(last).len() as f64;
                steps * (3.0 * (elements - rows) + SOFTMAX_ROW_FLOPS * rows)
            }
            _ => steps * elements,
        }
    }

    /// The type of the partial block a function spec leaves for output box `block`:
    /// `block` with its last interval `lo..hi` widened to `lo..hi + 1` where
    /// [`widens`](Self::widens) (the statistics column sits at `hi`, so a slice to `block`
    /// drops it and a slice of a sub-range of the values keeps working), `block` otherwise.
    pub fn partial_type(self, block: &TensorType, shared: bool) -> TensorType {
        if !self.widens(block, shared) {
            return block.clone();
        }
        widened(block)
    }

    /// The lowercase name.
    pub fn name(self) -> &'static str {
        self.into()
    }
}

/// FLOPs charged per row and step of an [`Aggregation::Softmax`] merge: a maximum, four
/// exponentials and a logarithm at 8 operations each (a transcendental's polynomial), and a
/// few additions and comparisons.
pub const SOFTMAX_ROW_FLOPS: f64 = 48.0;

/// `block` with its last interval one wider (the statistics column of
/// [`Aggregation::Softmax`]). A rank-0 block is returned as it is.
fn widened(block: &TensorType) -> TensorType {
    let Some(last) = block.rank().checked_sub(1) else {
        return block.clone();
    };
    let iv = block.dim(last);
    block.with_dim(last, Interval { lo: iv.lo, hi: iv.hi + 1 })
}

/// `max(a, b)` that is NaN where either is.
fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() { f32::NAN } else { a.max(b) }
}

/// Merges the partial softmax row `b` into `acc` ([`Aggregation::Softmax`]): both are
/// `n + 1` long, the values `o` then the log-sum-exp `lse`. With `m = max(lse_a, lse_b)`
/// (NaN where either is NaN):
/// - both `lse` are `−∞` (no key seen, or every seen score `−∞`): `lse = −∞` and
///   `o = o_a + o_b`, so an empty partial (`o = 0`) contributes nothing while a NaN row
///   (every seen score `−∞`) stays NaN;
/// - otherwise `lse = m + ln(e^(lse_a − m) + e^(lse_b − m))` and `o = w_a·o_a + w_b·o_b`,
///   `w = e^(lse − lse_new)`, where a term whose weight is exactly 0 is skipped: a partial
///   whose scores were all `−∞` (`o` NaN) does not poison one that saw a finite score, as
///   the softmax of their union gives those keys weight 0. A NaN `lse` (a NaN or `+∞`
///   score) makes the whole row NaN.
///
/// Computed in f32. Commutative (bit for bit up to the order of one addition) and
/// associative up to rounding; `(o = 0, lse = −∞)` is its identity.
pub fn merge_softmax_rows(acc: &mut [f32], b: &[f32]) {
    let n = acc.len().min(b.len());
    let Some(values) = n.checked_sub(1) else { return };
    let (la, lb) = (acc[values], b[values]);
    let m = nan_max(la, lb);
    if m == f32::NEG_INFINITY {
        acc[..values].iter_mut().zip(&b[..values]).for_each(|(o, &x)| *o += x);
        acc[values] = f32::NEG_INFINITY;
        return;
    }
    let lse = m + ((la - m).exp() + (lb - m).exp()).ln();
    let (wa, wb) = ((la - lse).exp(), (lb - lse).exp());
    for (o, &x) in acc[..values].iter_mut().zip(&b[..values]) {
        *o = match (wa == 0.0, wb == 0.0) {
            (true, true) => 0.0,
            (true, false) => wb * x,
            (false, true) => wa * *o,
            (false, false) => wa * *o + wb * x,
        };
    }
    acc[values] = lse;
}

impl fmt::Display for Aggregation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Aggregation; 4] = [Aggregation::Sum, Aggregation::Max, Aggregation::Min, Aggregation::Product];

    #[test]
    fn names_are_the_lowercase_variants() {
        let names: Vec<String> = ALL.iter().map(ToString::to_string).collect();
        assert_eq!(names, ["sum", "max", "min", "product"]);
        assert_eq!(ALL.map(Aggregation::name), ["sum", "max", "min", "product"]);
        assert_eq!(Aggregation::Softmax.name(), "softmax");
        assert!(ALL.iter().all(|a| a.is_elementwise()) && !Aggregation::Softmax.is_elementwise());
    }

    /// The partial of softmax over `scores` with `values` (one feature per key, two
    /// features: v and 2v): `[o0, o1, lse]`, as a kernel computes it.
    fn partial(scores: &[f32], values: &[f32]) -> Vec<f32> {
        if scores.is_empty() {
            return vec![0.0, 0.0, f32::NEG_INFINITY];
        }
        let m = scores.iter().copied().fold(f32::NEG_INFINITY, nan_max);
        if m == f32::NEG_INFINITY {
            return vec![f32::NAN, f32::NAN, f32::NEG_INFINITY];
        }
        let w: Vec<f32> = scores.iter().map(|s| (s - m).exp()).collect();
        let sum: f32 = w.iter().sum();
        let o: f32 = w.iter().zip(values).map(|(w, v)| w * v).sum::<f32>() / sum;
        vec![o, 2.0 * o, m + sum.ln()]
    }

    fn merged(a: &[f32], b: &[f32]) -> Vec<f32> {
        let mut acc = a.to_vec();
        merge_softmax_rows(&mut acc, b);
        acc
    }

    fn close(a: &[f32], b: &[f32]) -> bool {
        a.iter().zip(b).all(|(x, y)| x == y || (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-5 * (1.0 + y.abs()))
    }

    #[test]
    fn softmax_partials_merge_to_the_softmax_of_the_union() {
        let scores = [0.3, -1.2, 2.5, 0.0, -0.7, 1.1];
        let values = [1.0, -2.0, 0.5, 3.0, -1.5, 0.25];
        let whole = partial(&scores, &values);
        for cut in 0..=scores.len() {
            let (a, b) = (partial(&scores[..cut], &values[..cut]), partial(&scores[cut..], &values[cut..]));
            assert!(close(&merged(&a, &b), &whole), "cut {cut}: {:?} vs {whole:?}", merged(&a, &b));
            // Commutative.
            assert!(close(&merged(&b, &a), &merged(&a, &b)));
        }
        // Associative, to tolerance.
        let (x, y, z) = (
            partial(&scores[..2], &values[..2]),
            partial(&scores[2..3], &values[2..3]),
            partial(&scores[3..], &values[3..]),
        );
        assert!(close(&merged(&merged(&x, &y), &z), &merged(&x, &merged(&y, &z))));
        assert!(close(&merged(&merged(&x, &y), &z), &whole));
    }

    #[test]
    fn an_empty_partial_is_the_identity() {
        let empty = partial(&[], &[]);
        for row in [partial(&[0.5, 1.5], &[1.0, 2.0]), partial(&[f32::NEG_INFINITY], &[1.0]), vec![f32::NAN; 3]] {
            for got in [merged(&row, &empty), merged(&empty, &row)] {
                assert!(
                    got.iter().zip(&row).all(|(g, r)| g.to_bits() == r.to_bits() || (g.is_nan() && r.is_nan())),
                    "{got:?} vs {row:?}"
                );
            }
        }
        assert_eq!(merged(&empty, &empty), empty);
    }

    #[test]
    fn softmax_non_finite_cases_follow_the_softmax_of_the_union() {
        let (ninf, inf) = (f32::NEG_INFINITY, f32::INFINITY);
        // All −∞ in one part, finite in the other: the −∞ keys get weight 0.
        let got = merged(&partial(&[ninf, ninf], &[5.0, 6.0]), &partial(&[1.0], &[2.0]));
        assert_eq!(got, vec![2.0, 4.0, 1.0]);
        let got = merged(&partial(&[1.0], &[2.0]), &partial(&[ninf], &[5.0]));
        assert_eq!(got, vec![2.0, 4.0, 1.0]);
        // Every seen score −∞: NaN, whichever the split.
        let got = merged(&partial(&[ninf], &[1.0]), &partial(&[ninf], &[2.0]));
        assert!(got[0].is_nan() && got[1].is_nan() && got[2] == ninf);
        let got = merged(&partial(&[ninf], &[1.0]), &partial(&[], &[]));
        assert!(got[0].is_nan());
        // A NaN or +∞ score anywhere: NaN.
        for bad in [f32::NAN, inf] {
            let got = merged(&partial(&[0.5, bad], &[1.0, 2.0]), &partial(&[1.0], &[2.0]));
            assert!(got[0].is_nan() && got[1].is_nan(), "{bad}: {got:?}");
            let got = merged(&partial(&[1.0], &[2.0]), &partial(&[bad], &[1.0]));
            assert!(got[0].is_nan(), "{bad}: {got:?}");
        }
        // A NaN lse propagates.
        let got = merged(&[1.0, 1.0, f32::NAN], &[2.0, 2.0, 0.0]);
        assert!(got.iter().all(|x| x.is_nan()));
    }

    #[test]
    fn softmax_partials_are_one_column_wider_when_shared() {
        let b = TensorType::new(&[0, 2, 4], &[4, 3, 8]).unwrap();
        assert_eq!(Aggregation::Softmax.partial_type(&b, true), TensorType::new(&[0, 2, 4], &[4, 3, 9]).unwrap());
        assert_eq!(Aggregation::Softmax.partial_type(&b, false), b);
        assert_eq!(Aggregation::Sum.partial_type(&b, true), b);
    }

    #[test]
    fn softmax_merges_cost_more_flops_than_sums() {
        let ty = TensorType::new(&[0, 0], &[4, 9]).unwrap();
        assert_eq!(Aggregation::Sum.flops(3, &ty), 72.0);
        assert_eq!(Aggregation::Softmax.flops(3, &ty), 2.0 * (3.0 * 32.0 + SOFTMAX_ROW_FLOPS * 4.0));
        assert_eq!(Aggregation::Softmax.flops(1, &ty), 0.0);
    }

    #[test]
    #[should_panic(expected = "row-wise")]
    fn softmax_has_no_scalar_apply() {
        Aggregation::Softmax.apply(1.0, 2.0);
    }

    #[test]
    fn a_nan_on_either_side_is_the_result() {
        for agg in ALL {
            for (a, b) in [(f32::NAN, 1.0), (1.0, f32::NAN), (f32::NAN, f32::NEG_INFINITY), (f32::INFINITY, f32::NAN)] {
                assert!(agg.apply(a, b).is_nan(), "{agg}({a}, {b})");
            }
        }
    }

    #[test]
    fn infinities_and_identities() {
        let (inf, ninf) = (f32::INFINITY, f32::NEG_INFINITY);
        assert!(Aggregation::Sum.apply(inf, ninf).is_nan());
        assert!(Aggregation::Product.apply(inf, 0.0).is_nan());
        assert_eq!(Aggregation::Max.apply(ninf, -3.0), -3.0);
        assert_eq!(Aggregation::Max.apply(inf, 3.0), inf);
        assert_eq!(Aggregation::Min.apply(ninf, -3.0), ninf);
        assert_eq!(Aggregation::Min.apply(3.0, inf), 3.0);
        // The first operand on a tie, as np.maximum and np.minimum.
        assert!(Aggregation::Max.apply(-0.0, 0.0).is_sign_negative());
        assert!(Aggregation::Min.apply(0.0, -0.0).is_sign_positive());
        for agg in ALL {
            for x in [-2.5, 0.0, 7.0, f32::INFINITY, f32::NEG_INFINITY] {
                assert_eq!(agg.apply(x, agg.identity()), x, "{agg}: {x} ⊕ identity");
                assert_eq!(agg.apply(agg.identity(), x), x, "{agg}: identity ⊕ {x}");
            }
        }
    }
}
