//! Element types.

use std::fmt;

use crate::CoreError;

/// The element type a tensor is stored in. Kernels compute in f32 whatever the floating-point
/// storage; [`DType::I32`] holds indices (token ids, the result of an argmax), which only the
/// operators made for them read or write.
///
/// Its names (`f32`, `f16`, `bf16`, `i32`) are derived from the variants: [`name`](Self::name),
/// [`FromStr`](std::str::FromStr) (an unknown name is [`CoreError::UnknownDType`]) and `VARIANTS`
/// ([`strum::VariantNames`]) list them in declaration order.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Default,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantNames,
)]
#[strum(serialize_all = "lowercase", parse_err_ty = CoreError, parse_err_fn = unknown_dtype)]
pub enum DType {
    /// IEEE binary32.
    #[default]
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    BF16,
    /// Signed 32-bit integers: indices, never arithmetic.
    I32,
}

impl DType {
    /// Every floating-point dtype (the storage a computation's values may take), in the
    /// order help texts list them.
    pub const ALL: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    /// Whether values of this dtype are floating point (every dtype but [`DType::I32`]).
    pub fn is_float(self) -> bool {
        self != DType::I32
    }

    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// The lowercase name (`f32`, `f16`, `bf16`).
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// Machine epsilon of the storage type (twice its unit roundoff): a relative-error scale
    /// for comparisons; 0 for integers, which compare exactly.
    pub fn epsilon(self) -> f32 {
        match self {
            DType::F32 => f32::EPSILON,
            DType::F16 => half::f16::EPSILON.to_f32(),
            DType::BF16 => half::bf16::EPSILON.to_f32(),
            DType::I32 => 0.0,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error of parsing an unknown dtype name (`FromStr`, derived).
fn unknown_dtype(name: &str) -> CoreError {
    CoreError::UnknownDType(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        use strum::VariantNames;
        assert_eq!(DType::VARIANTS, ["f32", "f16", "bf16", "i32"]);
        for d in DType::ALL.into_iter().chain([DType::I32]) {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
        }
        assert!("f64".parse::<DType>().unwrap_err().to_string().contains("f64"));
        assert_eq!(DType::BF16.size_bytes(), 2);
    }
}
