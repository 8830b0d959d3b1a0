//! The aggregation ⊕ of Definition 3.7.

use std::fmt;

/// A binary, associative and commutative elementwise operation that combines the partial
/// outputs of function specs sharing one output box.
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
}

impl Aggregation {
    /// Applies ⊕ to two scalars, with IEEE semantics as NumPy's `add`, `maximum`, `minimum`
    /// and `multiply`: a NaN on either side gives NaN (for `Max` and `Min` too, where
    /// `f32::max` and `f32::min` would return the other operand, so a partial maximum that
    /// is NaN would vanish in the combination), `∞ + (−∞)` and `0 · ∞` are NaN. `Max` and
    /// `Min` return `a` where `a` is NaN or wins or ties (`max(-0, +0)` is `-0`), else `b`.
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
        }
    }

    /// The neutral element: `x ⊕ identity = x`.
    pub fn identity(self) -> f32 {
        match self {
            Aggregation::Sum => 0.0,
            Aggregation::Max => f32::NEG_INFINITY,
            Aggregation::Min => f32::INFINITY,
            Aggregation::Product => 1.0,
        }
    }

    /// The lowercase name.
    pub fn name(self) -> &'static str {
        self.into()
    }
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
