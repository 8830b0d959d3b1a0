//! Zero-bounded tensor descriptions with named indices, as users see them.

use std::fmt;

use crate::{CoreError, DType, Result, TensorType};

/// A named index and its extent, e.g. `tokens = 4096`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Dim {
    /// The index name.
    pub name: String,
    /// Its extent (the upper bound of a zero-bounded type).
    pub extent: usize,
}

impl Dim {
    /// `name = extent`.
    pub fn new(name: impl Into<String>, extent: usize) -> Self {
        Self { name: name.into(), extent }
    }
}

/// A zero-bounded tensor type with named indices and a storage dtype.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorDesc {
    /// The named dimensions, outermost first (row-major).
    pub dims: Vec<Dim>,
    /// The storage dtype.
    pub dtype: DType,
}

impl TensorDesc {
    /// A descriptor; fails when a name repeats, an extent is zero, or the tensor's size in
    /// bytes does not fit in a `usize`.
    pub fn new(dims: Vec<Dim>, dtype: DType) -> Result<Self> {
        let desc = Self { dims, dtype };
        for (i, d) in desc.dims.iter().enumerate() {
            if desc.dims[..i].iter().any(|e| e.name == d.name) {
                return Err(CoreError::DuplicateIndex { name: d.name.clone(), dims: desc.dims_string() });
            }
            if d.extent == 0 {
                return Err(CoreError::EmptyIndex { name: d.name.clone(), dims: desc.dims_string() });
            }
        }
        if desc.checked_size_bytes().is_none() {
            return Err(CoreError::TooLarge { dims: desc.dims_string(), dtype });
        }
        Ok(desc)
    }

    /// Bytes of the whole tensor, or `None` when that overflows a `usize`.
    pub fn checked_size_bytes(&self) -> Option<usize> {
        self.dims.iter().try_fold(self.dtype.size_bytes(), |acc, d| acc.checked_mul(d.extent))
    }

    /// Shorthand: `TensorDesc::of(&[("i", 4), ("j", 8)], DType::F32)`.
    pub fn of(dims: &[(&str, usize)], dtype: DType) -> Result<Self> {
        Self::new(dims.iter().map(|&(n, e)| Dim::new(n, e)).collect(), dtype)
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// The extents, in order.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().map(|d| d.extent).collect()
    }

    /// The zero-bounded [`TensorType`] `[0, shape)`.
    pub fn tensor_type(&self) -> TensorType {
        TensorType::zero_bounded(&self.shape())
    }

    /// Position of the named index, if present.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.dims.iter().position(|d| d.name == name)
    }

    /// Position of the named index, or an error naming the tensor's indices.
    pub fn index_of(&self, name: &str) -> Result<usize> {
        self.position(name).ok_or_else(|| CoreError::UnknownIndex { name: name.to_string(), dims: self.dims_string() })
    }

    /// Extent of the named index.
    pub fn extent(&self, name: &str) -> Result<usize> {
        Ok(self.dims[self.index_of(name)?].extent)
    }

    /// True when the tensor has the named index.
    pub fn has(&self, name: &str) -> bool {
        self.position(name).is_some()
    }

    /// Bytes of the whole tensor.
    pub fn size_bytes(&self) -> usize {
        self.shape().iter().product::<usize>() * self.dtype.size_bytes()
    }

    /// `name=extent, ...`, for messages.
    pub fn dims_string(&self) -> String {
        self.dims.iter().map(|d| format!("{}={}", d.name, d.extent)).collect::<Vec<_>>().join(", ")
    }
}

impl fmt::Display for TensorDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.dims_string(), self.dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_lookup_and_errors() {
        let d = TensorDesc::of(&[("tokens", 8), ("d_model", 4)], DType::F16).unwrap();
        assert_eq!(d.index_of("d_model").unwrap(), 1);
        assert_eq!(d.extent("tokens").unwrap(), 8);
        assert_eq!(d.size_bytes(), 64);
        let err = d.index_of("heads").unwrap_err().to_string();
        assert!(err.contains("heads") && err.contains("tokens=8"), "{err}");
        assert!(TensorDesc::of(&[("i", 2), ("i", 3)], DType::F32).is_err());
        assert!(matches!(TensorDesc::of(&[("i", 0)], DType::F32), Err(CoreError::EmptyIndex { .. })));
        let huge = TensorDesc::of(&[("i", 1 << 40), ("j", 1 << 40)], DType::F16);
        assert!(matches!(huge, Err(CoreError::TooLarge { .. })), "{huge:?}");
    }
}
