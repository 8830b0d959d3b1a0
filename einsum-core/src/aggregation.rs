//! The aggregation ⊕ of Definition 3.7.

use std::fmt;

/// A binary, associative and commutative elementwise operation that combines the partial
/// outputs of function specs sharing one output box.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Aggregation {
    /// `a + b` (contractions, sums).
    #[default]
    Sum,
    /// `max(a, b)`.
    Max,
    /// `min(a, b)`.
    Min,
    /// `a · b`.
    Product,
}

impl Aggregation {
    /// Applies ⊕ to two scalars.
    pub fn apply(self, a: f32, b: f32) -> f32 {
        match self {
            Aggregation::Sum => a + b,
            Aggregation::Max => a.max(b),
            Aggregation::Min => a.min(b),
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
        match self {
            Aggregation::Sum => "sum",
            Aggregation::Max => "max",
            Aggregation::Min => "min",
            Aggregation::Product => "product",
        }
    }
}

impl fmt::Display for Aggregation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
