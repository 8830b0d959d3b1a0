//! Element types.

use std::{fmt, str::FromStr};

use crate::CoreError;

/// The element type a tensor is stored in. Kernels compute in f32 whatever the storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum DType {
    /// IEEE binary32.
    #[default]
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    BF16,
}

impl DType {
    /// Every dtype, in the order help texts list them.
    pub const ALL: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// The lowercase name (`f32`, `f16`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }

    /// Machine epsilon of the storage type (twice its unit roundoff): a relative-error scale
    /// for comparisons.
    pub fn epsilon(self) -> f32 {
        match self {
            DType::F32 => f32::EPSILON,
            DType::F16 => half::f16::EPSILON.to_f32(),
            DType::BF16 => half::bf16::EPSILON.to_f32(),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = CoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f32" => Ok(DType::F32),
            "f16" => Ok(DType::F16),
            "bf16" => Ok(DType::BF16),
            other => Err(CoreError::UnknownDType(other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
        }
        assert!("f64".parse::<DType>().unwrap_err().to_string().contains("f64"));
        assert_eq!(DType::BF16.size_bytes(), 2);
    }
}
