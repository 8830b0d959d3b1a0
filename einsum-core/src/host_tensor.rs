//! Dense host tensors that carry their [`TensorType`].

use std::sync::Arc;

use half::{bf16, f16};

use crate::{Aggregation, CoreError, DType, Result, SeededRng, TensorType, check_tiling};

/// Row-major element storage in the tensor's dtype.
#[derive(Clone, Debug, PartialEq)]
enum Storage {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
}

impl Storage {
    fn from_f32(dtype: DType, data: Vec<f32>) -> Self {
        match dtype {
            DType::F32 => Storage::F32(data),
            DType::F16 => Storage::F16(data.iter().map(|&x| f16::from_f32(x)).collect()),
            DType::BF16 => Storage::BF16(data.iter().map(|&x| bf16::from_f32(x)).collect()),
        }
    }

    fn zeros(dtype: DType, len: usize) -> Self {
        match dtype {
            DType::F32 => Storage::F32(vec![0.0; len]),
            DType::F16 => Storage::F16(vec![f16::ZERO; len]),
            DType::BF16 => Storage::BF16(vec![bf16::ZERO; len]),
        }
    }

    fn len(&self) -> usize {
        match self {
            Storage::F32(v) => v.len(),
            Storage::F16(v) => v.len(),
            Storage::BF16(v) => v.len(),
        }
    }
}

/// A tensor's elements borrowed in their storage dtype ([`HostTensor::elements`]).
#[derive(Clone, Copy, Debug)]
pub enum Elements<'a> {
    /// f32 storage.
    F32(&'a [f32]),
    /// f16 storage.
    F16(&'a [f16]),
    /// bf16 storage.
    BF16(&'a [bf16]),
}

/// A dense, row-major tensor whose index set is its [`TensorType`], which may have non-zero
/// lower bounds: a block sliced out of a larger tensor keeps its absolute position.
///
/// The elements are immutable and shared: `clone` is a reference-count increment, not a
/// copy, so a backend can hand the same block to several readers (kernel arguments,
/// transfers, stitches) without moving its bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    ty: TensorType,
    data: Arc<Storage>,
}

impl HostTensor {
    /// A tensor of type `ty` holding `data` (row-major f32), rounded to `dtype`.
    pub fn from_f32(ty: TensorType, dtype: DType, data: Vec<f32>) -> Result<Self> {
        if data.len() != ty.volume() {
            return Err(CoreError::DataLength { expected: ty.volume(), got: data.len(), ty });
        }
        Ok(Self { ty, data: Arc::new(Storage::from_f32(dtype, data)) })
    }

    /// A tensor of type `ty` with every element equal to `value`.
    pub fn filled(ty: TensorType, dtype: DType, value: f32) -> Self {
        let data = vec![value; ty.volume()];
        Self { data: Arc::new(Storage::from_f32(dtype, data)), ty }
    }

    /// A tensor of uniform random values in `[-1, 1)`, reproducible from `seed`.
    pub fn random(ty: TensorType, dtype: DType, seed: u64) -> Self {
        let mut rng = SeededRng::new(seed);
        let data = (0..ty.volume()).map(|_| rng.uniform(-1.0, 1.0)).collect();
        Self { data: Arc::new(Storage::from_f32(dtype, data)), ty }
    }

    /// The tensor's type (its absolute index box).
    pub fn ty(&self) -> &TensorType {
        &self.ty
    }

    /// The storage dtype.
    pub fn dtype(&self) -> DType {
        match *self.data {
            Storage::F32(_) => DType::F32,
            Storage::F16(_) => DType::F16,
            Storage::BF16(_) => DType::BF16,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// True when the tensor holds no element.
    pub fn is_empty(&self) -> bool {
        self.data.len() == 0
    }

    /// Bytes of storage.
    pub fn size_bytes(&self) -> usize {
        self.len() * self.dtype().size_bytes()
    }

    /// The elements as f32, row-major.
    pub fn to_f32(&self) -> Vec<f32> {
        match &*self.data {
            Storage::F32(v) => v.clone(),
            Storage::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            Storage::BF16(v) => v.iter().map(|x| x.to_f32()).collect(),
        }
    }

    /// The storage bytes, row-major and native-endian, in the tensor's own dtype (f16 and
    /// bf16 as their bit patterns): what a device buffer of this tensor holds. No element
    /// passes through f32, so every bit pattern (NaN payloads included) is kept.
    pub fn to_ne_bytes(&self) -> Vec<u8> {
        match &*self.data {
            Storage::F32(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
            Storage::F16(v) => v.iter().flat_map(|x| x.to_bits().to_ne_bytes()).collect(),
            Storage::BF16(v) => v.iter().flat_map(|x| x.to_bits().to_ne_bytes()).collect(),
        }
    }

    /// The tensor of type `ty` and dtype `dtype` whose storage bytes are `bytes` (the inverse
    /// of [`to_ne_bytes`](Self::to_ne_bytes)); `bytes` must hold exactly the type's volume of
    /// elements ([`CoreError::DataLength`] otherwise, counting whole and partial elements).
    pub fn from_ne_bytes(ty: TensorType, dtype: DType, bytes: &[u8]) -> Result<Self> {
        let size = dtype.size_bytes();
        if bytes.len() != ty.volume() * size {
            return Err(CoreError::DataLength { expected: ty.volume(), got: bytes.len().div_ceil(size), ty });
        }
        let u16s = || bytes.chunks_exact(2).map(|c| u16::from_ne_bytes([c[0], c[1]]));
        let data = match dtype {
            DType::F32 => {
                Storage::F32(bytes.chunks_exact(4).map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect())
            }
            DType::F16 => Storage::F16(u16s().map(f16::from_bits).collect()),
            DType::BF16 => Storage::BF16(u16s().map(bf16::from_bits).collect()),
        };
        Ok(Self { ty, data: Arc::new(data) })
    }

    /// The f32 elements without a copy, when the storage is f32.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &*self.data {
            Storage::F32(v) => Some(v),
            _ => None,
        }
    }

    /// The elements without a copy, in their storage dtype, so that a kernel can convert
    /// them piece by piece as it reads them (a GEMM panel, a chunk of an elementwise pass).
    pub fn elements(&self) -> Elements<'_> {
        match &*self.data {
            Storage::F32(v) => Elements::F32(v),
            Storage::F16(v) => Elements::F16(v),
            Storage::BF16(v) => Elements::BF16(v),
        }
    }

    /// The element at an absolute index vector, if it lies in the tensor's box.
    pub fn get(&self, index: &[usize]) -> Option<f32> {
        if !self.ty.contains(index) {
            return None;
        }
        let offset: usize =
            index.iter().zip(self.ty.dims()).zip(self.ty.strides()).map(|((&i, d), s)| (i - d.lo) * s).sum();
        Some(match &*self.data {
            Storage::F32(v) => v[offset],
            Storage::F16(v) => v[offset].to_f32(),
            Storage::BF16(v) => v[offset].to_f32(),
        })
    }

    /// The same values stored in another dtype.
    pub fn cast(&self, dtype: DType) -> HostTensor {
        if dtype == self.dtype() {
            return self.clone();
        }
        Self { ty: self.ty.clone(), data: Arc::new(Storage::from_f32(dtype, self.to_f32())) }
    }

    /// The restriction of this tensor to `part` (Definition 3.5), which must be a projection
    /// of its type; the result keeps `part`'s absolute bounds. The whole tensor's slice
    /// shares its elements (no copy).
    pub fn slice(&self, part: &TensorType) -> Result<HostTensor> {
        part.check_projection_of(&self.ty)?;
        if *part == self.ty {
            return Ok(self.clone());
        }
        let mut out = Storage::zeros(self.dtype(), part.volume());
        copy_storage(&self.data, &self.ty, &mut out, part, part);
        Ok(HostTensor { ty: part.clone(), data: Arc::new(out) })
    }

    /// The tensor of type `whole` that agrees with every part: the recompose step of
    /// Definition 3.7. The parts must tile `whole` and share one dtype.
    pub fn stitch(whole: &TensorType, parts: &[HostTensor]) -> Result<HostTensor> {
        let types: Vec<TensorType> = parts.iter().map(|p| p.ty.clone()).collect();
        check_tiling(whole, &types)?;
        if let [only] = parts {
            // One part tiling the whole is the whole: share it.
            return Ok(only.clone());
        }
        let dtype = parts.first().map_or(DType::F32, HostTensor::dtype);
        let mut out = Storage::zeros(dtype, whole.volume());
        for p in parts {
            if p.dtype() != dtype {
                return Err(mismatch("stitch", &parts[0], p));
            }
            copy_storage(&p.data, &p.ty, &mut out, whole, &p.ty);
        }
        Ok(HostTensor { ty: whole.clone(), data: Arc::new(out) })
    }

    /// Elementwise `self ⊕ other`, for tensors of one type and dtype (computed in f32).
    pub fn aggregate(&self, other: &HostTensor, agg: Aggregation) -> Result<HostTensor> {
        if self.ty != other.ty || self.dtype() != other.dtype() {
            return Err(mismatch("aggregate", self, other));
        }
        let data = self.to_f32().into_iter().zip(other.to_f32()).map(|(a, b)| agg.apply(a, b)).collect();
        HostTensor::from_f32(self.ty.clone(), self.dtype(), data)
    }
}

fn mismatch(op: &'static str, a: &HostTensor, b: &HostTensor) -> CoreError {
    CoreError::TensorMismatch {
        op,
        left: a.ty.clone(),
        left_dtype: a.dtype(),
        right: b.ty.clone(),
        right_dtype: b.dtype(),
    }
}

/// Copies the elements of `region` from `src` (laid out as `src_ty`) into `dst` (laid out as
/// `dst_ty`). `region` lies within both types; storages share a dtype.
fn copy_storage(src: &Storage, src_ty: &TensorType, dst: &mut Storage, dst_ty: &TensorType, region: &TensorType) {
    match (src, dst) {
        (Storage::F32(s), Storage::F32(d)) => copy_region(s, src_ty, d, dst_ty, region),
        (Storage::F16(s), Storage::F16(d)) => copy_region(s, src_ty, d, dst_ty, region),
        (Storage::BF16(s), Storage::BF16(d)) => copy_region(s, src_ty, d, dst_ty, region),
        _ => unreachable!("callers check that the dtypes agree"),
    }
}

fn copy_region<T: Copy>(src: &[T], src_ty: &TensorType, dst: &mut [T], dst_ty: &TensorType, region: &TensorType) {
    if region.is_empty() {
        return;
    }
    let rank = region.rank();
    if rank == 0 {
        dst[0] = src[0];
        return;
    }
    let (ss, ds) = (src_ty.strides(), dst_ty.strides());
    let offset = |ty: &TensorType, strides: &[usize], idx: &[usize]| -> usize {
        idx.iter().zip(ty.dims()).zip(strides).map(|((&i, d), s)| (i - d.lo) * s).sum()
    };
    let run = region.dim(rank - 1).len();
    let mut idx = region.lower();
    loop {
        let (so, dof) = (offset(src_ty, &ss, &idx), offset(dst_ty, &ds, &idx));
        dst[dof..dof + run].copy_from_slice(&src[so..so + run]);
        // Advance the odometer over all dimensions but the last.
        let mut d = rank - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < region.dim(d).hi {
                break;
            }
            idx[d] = region.dim(d).lo;
        }
    }
}

/// Normwise relative error `max|a - b| / max|b|` of `a` against the reference `b`.
///
/// Returns infinity when the types differ or a difference is not finite, and the absolute
/// error when `b` is all zeros.
pub fn relative_error(a: &HostTensor, b: &HostTensor) -> f32 {
    scaled_error(a, b, 0.0)
}

/// `max|a - b| / max(max|b|, floor)`: relative error for a reference at or above `floor`,
/// absolute error (at the scale `floor`) below it, so a reference that cancels to near zero
/// is not judged on its own tiny scale. Infinite when the types differ or any difference is
/// not finite (a NaN on either side, an infinity on one side, or infinities on both: ∞ − ∞
/// is no evidence of agreement), so that a `max` over several errors can never drop a
/// mismatch as NaN; the absolute error when the scale is zero.
pub fn scaled_error(a: &HostTensor, b: &HostTensor, floor: f32) -> f32 {
    if a.ty != b.ty {
        return f32::INFINITY;
    }
    let (a, b) = (a.to_f32(), b.to_f32());
    let mut diff = 0.0f32;
    for (x, y) in a.iter().zip(&b) {
        let d = (x - y).abs();
        if !d.is_finite() {
            return f32::INFINITY;
        }
        diff = diff.max(d);
    }
    let scale = b.iter().fold(floor, |m, v| m.max(v.abs()));
    if scale > 0.0 { diff / scale } else { diff }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tt(lo: &[usize], hi: &[usize]) -> TensorType {
        TensorType::new(lo, hi).unwrap()
    }

    /// Clones, whole slices and one-part stitches share the elements; a proper slice and a
    /// stitch of several parts make their own.
    #[test]
    fn whole_blocks_share_their_elements() {
        let t = HostTensor::random(tt(&[0, 0], &[4, 6]), DType::F32, 3);
        let at = |x: &HostTensor| x.as_f32().unwrap().as_ptr();
        assert_eq!(at(&t.clone()), at(&t));
        let whole = t.slice(t.ty()).unwrap();
        assert_eq!((at(&whole), &whole), (at(&t), &t));
        let stitched = HostTensor::stitch(t.ty(), std::slice::from_ref(&t)).unwrap();
        assert_eq!(at(&stitched), at(&t));
        let (top, bottom) = (t.slice(&tt(&[0, 0], &[2, 6])).unwrap(), t.slice(&tt(&[2, 0], &[4, 6])).unwrap());
        assert_ne!(at(&top), at(&t));
        let again = HostTensor::stitch(t.ty(), &[top, bottom]).unwrap();
        assert_ne!(at(&again), at(&t));
        assert_eq!(again, t);
    }

    #[test]
    fn slice_keeps_absolute_position() {
        let whole = TensorType::zero_bounded(&[3, 4]);
        let t = HostTensor::from_f32(whole, DType::F32, (0..12).map(|x| x as f32).collect()).unwrap();
        let s = t.slice(&tt(&[1, 2], &[3, 4])).unwrap();
        assert_eq!(s.to_f32(), vec![6.0, 7.0, 10.0, 11.0]);
        assert_eq!(s.get(&[2, 3]), Some(11.0));
        assert_eq!(s.get(&[0, 0]), None);
        let s2 = s.slice(&tt(&[2, 2], &[3, 3])).unwrap();
        assert_eq!(s2.to_f32(), vec![10.0]);
        assert!(s.slice(&tt(&[0, 0], &[1, 1])).is_err());
    }

    #[test]
    fn stitch_inverts_slice_for_every_dtype() {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let whole = TensorType::zero_bounded(&[5, 3, 4]);
            let t = HostTensor::random(whole.clone(), dtype, 7);
            let tiling = crate::Tiling::grid(&whole, &[vec![2], vec![1], vec![3]]).unwrap();
            let parts: Vec<_> = tiling.blocks().iter().map(|b| t.slice(b).unwrap()).collect();
            assert_eq!(HostTensor::stitch(&whole, &parts).unwrap(), t);
            assert!(HostTensor::stitch(&whole, &parts[1..]).is_err());
        }
    }

    /// Storage bytes round-trip every bit pattern in every dtype (a pass through f32 would
    /// quiet a signalling NaN), and a wrong length is a typed error.
    #[test]
    fn storage_bytes_round_trip_bit_exactly() {
        let ty = tt(&[2, 0], &[4, 3]);
        for dtype in DType::ALL {
            let x = HostTensor::random(ty.clone(), dtype, 9);
            let bytes = x.to_ne_bytes();
            assert_eq!(bytes.len(), x.size_bytes());
            assert_eq!(HostTensor::from_ne_bytes(ty.clone(), dtype, &bytes).unwrap(), x);
            let short = HostTensor::from_ne_bytes(ty.clone(), dtype, &bytes[1..]).unwrap_err();
            assert!(matches!(short, CoreError::DataLength { expected: 6, got: 6, .. }), "{short}");
        }
        let snan = 0x7c01u16; // f16 signalling NaN with payload 1
        let mut bytes = Vec::new();
        for _ in 0..6 {
            bytes.extend_from_slice(&snan.to_ne_bytes());
        }
        let x = HostTensor::from_ne_bytes(ty, DType::F16, &bytes).unwrap();
        assert_eq!(x.to_ne_bytes(), bytes);
    }

    #[test]
    fn aggregate_applies_the_operation() {
        let ty = TensorType::zero_bounded(&[2]);
        let a = HostTensor::from_f32(ty.clone(), DType::F32, vec![1.0, 5.0]).unwrap();
        let b = HostTensor::from_f32(ty.clone(), DType::F32, vec![3.0, 2.0]).unwrap();
        assert_eq!(a.aggregate(&b, Aggregation::Sum).unwrap().to_f32(), vec![4.0, 7.0]);
        assert_eq!(a.aggregate(&b, Aggregation::Max).unwrap().to_f32(), vec![3.0, 5.0]);
        assert_eq!(a.aggregate(&b, Aggregation::Min).unwrap().to_f32(), vec![1.0, 2.0]);
        assert_eq!(a.aggregate(&b, Aggregation::Product).unwrap().to_f32(), vec![3.0, 10.0]);
        assert!(a.aggregate(&b.cast(DType::F16), Aggregation::Sum).is_err());
        assert!(HostTensor::from_f32(ty, DType::F32, vec![1.0]).is_err());
    }

    #[test]
    fn random_is_reproducible_and_nonzero() {
        let ty = TensorType::zero_bounded(&[64]);
        let a = HostTensor::random(ty.clone(), DType::F32, 1);
        assert_eq!(a, HostTensor::random(ty.clone(), DType::F32, 1));
        assert_ne!(a, HostTensor::random(ty, DType::F32, 2));
        assert!(a.to_f32().iter().any(|&x| x != 0.0));
    }

    #[test]
    fn relative_error_is_normwise() {
        let ty = TensorType::zero_bounded(&[2]);
        let a = HostTensor::from_f32(ty.clone(), DType::F32, vec![1.0, 2.0]).unwrap();
        let b = HostTensor::from_f32(ty, DType::F32, vec![1.0, 2.2]).unwrap();
        assert!((relative_error(&a, &b) - 0.2 / 2.2).abs() < 1e-6);
        assert!((scaled_error(&a, &b, 4.0) - 0.2 / 4.0).abs() < 1e-6);
        let nan = HostTensor::from_f32(TensorType::zero_bounded(&[2]), DType::F32, vec![f32::NAN, 2.0]).unwrap();
        assert_eq!(relative_error(&nan, &b), f32::INFINITY);
        // An infinite reference against a finite result used to give ∞/∞ = NaN, which a
        // `max` fold over several outputs drops.
        let inf = HostTensor::from_f32(TensorType::zero_bounded(&[2]), DType::F32, vec![f32::INFINITY, 2.0]).unwrap();
        assert_eq!(scaled_error(&a, &inf, 1.0), f32::INFINITY);
        assert_eq!(scaled_error(&inf, &inf, 1.0), f32::INFINITY);
        assert_eq!([0.5, scaled_error(&a, &inf, 1.0)].into_iter().fold(0.0, f32::max), f32::INFINITY);
    }
}
