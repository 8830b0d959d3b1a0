//! Dense host tensors that carry their [`TensorType`], and views of them.

use std::{borrow::Cow, ops::Range, sync::Arc};

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use crate::{Aggregation, CoreError, DType, Lease, Result, SeededRng, TensorType, check_tiling};

mod overwrite;

/// Row-major elements in one dtype: a vector of the heap's, or memory a backend lent.
#[derive(Debug)]
enum Storage {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    I32(Vec<i32>),
    /// `len` elements of `dtype` in a backend's memory (an arena slot).
    Lent {
        lease: Lease,
        dtype: DType,
        len: usize,
    },
}

/// A tensor's elements borrowed in their storage dtype ([`HostTensor::elements`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Elements<'a> {
    /// f32 storage.
    F32(&'a [f32]),
    /// f16 storage.
    F16(&'a [f16]),
    /// bf16 storage.
    BF16(&'a [bf16]),
    /// i32 storage.
    I32(&'a [i32]),
}

/// Elements of one dtype to write.
enum ElemsMut<'a> {
    F32(&'a mut [f32]),
    F16(&'a mut [f16]),
    BF16(&'a mut [bf16]),
    I32(&'a mut [i32]),
}

impl<'a> Elements<'a> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Elements::F32(v) => v.len(),
            Elements::F16(v) => v.len(),
            Elements::BF16(v) => v.len(),
            Elements::I32(v) => v.len(),
        }
    }

    /// True when there is no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn range(self, r: Range<usize>) -> Self {
        match self {
            Elements::F32(v) => Elements::F32(&v[r]),
            Elements::F16(v) => Elements::F16(&v[r]),
            Elements::BF16(v) => Elements::BF16(&v[r]),
            Elements::I32(v) => Elements::I32(&v[r]),
        }
    }

    /// The elements' bytes, native-endian (f16 and bf16 as their bit patterns).
    fn as_ne_bytes(self) -> &'a [u8] {
        // SAFETY: every element type here is plain old data (f32, i32, and f16/bf16, which
        // are `repr(transparent)` over u16) with no padding; u8 has alignment 1, and the
        // byte slice covers exactly the elements' memory for the elements' lifetime.
        unsafe {
            match self {
                Elements::F32(v) => std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)),
                Elements::F16(v) => std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)),
                Elements::BF16(v) => std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)),
                Elements::I32(v) => std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)),
            }
        }
    }

    fn to_f32(self) -> Vec<f32> {
        match self {
            Elements::F32(v) => v.to_vec(),
            Elements::F16(v) => widen(v),
            Elements::BF16(v) => widen(v),
            Elements::I32(v) => v.iter().map(|&x| x as f32).collect(),
        }
    }
}

/// Half-precision elements widened to f32 through `half`'s slice conversion, which uses the
/// CPU's conversion instructions (F16C) where it has them instead of one call per element.
pub fn widen<T>(v: &[T]) -> Vec<f32>
where
    [T]: HalfFloatSliceExt,
{
    let mut out = vec![0.0; v.len()];
    v.convert_to_f32_slice(&mut out);
    out
}

/// f32 values rounded to a half-precision type (to nearest, ties to even), through `half`'s
/// slice conversion (see [`widen`]).
pub fn narrow<T: Copy + Default>(v: &[f32]) -> Vec<T>
where
    [T]: HalfFloatSliceExt,
{
    let mut out = vec![T::default(); v.len()];
    out.convert_from_f32_slice(v);
    out
}

impl<'a> ElemsMut<'a> {
    /// The elements' bytes, writable, native-endian.
    fn into_ne_bytes(self) -> &'a mut [u8] {
        // SAFETY: as in `Elements::as_ne_bytes`; moreover every bit pattern is a valid
        // value of each element type, so any bytes written leave valid elements.
        unsafe {
            match self {
                ElemsMut::F32(v) => std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), std::mem::size_of_val(v)),
                ElemsMut::F16(v) => std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), std::mem::size_of_val(v)),
                ElemsMut::BF16(v) => std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), std::mem::size_of_val(v)),
                ElemsMut::I32(v) => std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), std::mem::size_of_val(v)),
            }
        }
    }
}

impl Storage {
    fn from_f32(dtype: DType, data: Vec<f32>) -> Self {
        match dtype {
            DType::F32 => Storage::F32(data),
            DType::F16 => Storage::F16(narrow(&data)),
            DType::BF16 => Storage::BF16(narrow(&data)),
            DType::I32 => Storage::I32(data.iter().map(|&x| x as i32).collect()),
        }
    }

    fn zeros(dtype: DType, len: usize) -> Self {
        match dtype {
            DType::F32 => Storage::F32(vec![0.0; len]),
            DType::F16 => Storage::F16(vec![f16::ZERO; len]),
            DType::BF16 => Storage::BF16(vec![bf16::ZERO; len]),
            DType::I32 => Storage::I32(vec![0; len]),
        }
    }

    /// Room for `len` elements of `dtype` for a block of type `ty`: in `lease` when one is
    /// given (an error if it is too small), else a new vector.
    fn place(lease: Option<Lease>, ty: &TensorType, dtype: DType, len: usize) -> Result<Self> {
        match lease {
            None => Ok(Self::zeros(dtype, len)),
            Some(lease) if lease.bytes() < len * dtype.size_bytes() => {
                Err(CoreError::DataLength { expected: len, got: lease.bytes() / dtype.size_bytes(), ty: ty.clone() })
            }
            Some(lease) => Ok(Storage::Lent { lease, dtype, len }),
        }
    }

    fn dtype(&self) -> DType {
        match self {
            Storage::F32(_) => DType::F32,
            Storage::F16(_) => DType::F16,
            Storage::BF16(_) => DType::BF16,
            Storage::I32(_) => DType::I32,
            Storage::Lent { dtype, .. } => *dtype,
        }
    }

    fn elems(&self) -> Elements<'_> {
        match self {
            Storage::F32(v) => Elements::F32(v),
            Storage::F16(v) => Elements::F16(v),
            Storage::BF16(v) => Elements::BF16(v),
            Storage::I32(v) => Elements::I32(v),
            // SAFETY: `place` checked that the lease holds `len` elements; lent memory is
            // initialised (`Lease::new`) and only this storage touches it.
            Storage::Lent { lease, dtype, len } => unsafe {
                match dtype {
                    DType::F32 => Elements::F32(lease.slice(*len)),
                    DType::F16 => Elements::F16(lease.slice(*len)),
                    DType::BF16 => Elements::BF16(lease.slice(*len)),
                    DType::I32 => Elements::I32(lease.slice(*len)),
                }
            },
        }
    }

    fn elems_mut(&mut self) -> ElemsMut<'_> {
        match self {
            Storage::F32(v) => ElemsMut::F32(v),
            Storage::F16(v) => ElemsMut::F16(v),
            Storage::BF16(v) => ElemsMut::BF16(v),
            Storage::I32(v) => ElemsMut::I32(v),
            // SAFETY: as in `elems`; `&mut self` is the only access.
            Storage::Lent { lease, dtype, len } => unsafe {
                match dtype {
                    DType::F32 => ElemsMut::F32(lease.slice_mut(*len)),
                    DType::F16 => ElemsMut::F16(lease.slice_mut(*len)),
                    DType::BF16 => ElemsMut::BF16(lease.slice_mut(*len)),
                    DType::I32 => ElemsMut::I32(lease.slice_mut(*len)),
                }
            },
        }
    }
}

/// Elements laid out row-major over `frame`, which a tensor's type lies in.
#[derive(Debug)]
struct Block {
    frame: TensorType,
    storage: Storage,
}

/// A dense tensor whose index set is its [`TensorType`], which may have non-zero lower
/// bounds: a block sliced out of a larger tensor keeps its absolute position.
///
/// The elements are shared: `clone` is a reference-count increment, not a copy, so a
/// backend can hand the same block to several readers (kernel arguments, transfers,
/// stitches) without moving its bytes. The one write, [`HostTensor::overwrite`], is
/// copy-on-write: no other tensor sees it.
///
/// # Views
/// A tensor reads its elements from a row-major block whose type (its *frame*) contains the
/// tensor's type: its own, or a larger one it is a view of ([`HostTensor::view`]). A view
/// whose elements are one contiguous run of the frame (a range of rows, say) is as good as a
/// compact tensor: [`HostTensor::as_f32`] borrows it. Any other view is strided: reading it
/// whole ([`HostTensor::to_f32`]) gathers, and [`HostTensor::slice`] compacts it at once.
/// Equality compares types, dtypes and elements, never layouts.
#[derive(Clone, Debug)]
pub struct HostTensor {
    ty: TensorType,
    data: Arc<Block>,
}

impl PartialEq for HostTensor {
    fn eq(&self, other: &Self) -> bool {
        self.ty == other.ty && self.with_elems(|a| other.with_elems(|b| a == b))
    }
}

impl HostTensor {
    /// A compact tensor of type `ty` holding `storage`.
    fn owned(ty: TensorType, storage: Storage) -> Self {
        Self { data: Arc::new(Block { frame: ty.clone(), storage }), ty }
    }

    /// A tensor of type `ty` holding `data` (row-major f32), rounded to `dtype`.
    pub fn from_f32(ty: TensorType, dtype: DType, data: Vec<f32>) -> Result<Self> {
        if data.len() != ty.volume() {
            return Err(CoreError::DataLength { expected: ty.volume(), got: data.len(), ty });
        }
        Ok(Self::owned(ty, Storage::from_f32(dtype, data)))
    }

    /// An [`DType::F16`] tensor of type `ty` holding `data` (row-major), kept as given: for
    /// values already in half precision (a checkpoint's weights), where [`from_f32`](Self::from_f32)
    /// would need an f32 vector twice their size.
    pub fn from_f16(ty: TensorType, data: Vec<f16>) -> Result<Self> {
        if data.len() != ty.volume() {
            return Err(CoreError::DataLength { expected: ty.volume(), got: data.len(), ty });
        }
        Ok(Self::owned(ty, Storage::F16(data)))
    }

    /// An [`DType::BF16`] tensor of type `ty` holding `data` (row-major), kept as given (see
    /// [`from_f16`](Self::from_f16)).
    pub fn from_bf16(ty: TensorType, data: Vec<bf16>) -> Result<Self> {
        if data.len() != ty.volume() {
            return Err(CoreError::DataLength { expected: ty.volume(), got: data.len(), ty });
        }
        Ok(Self::owned(ty, Storage::BF16(data)))
    }

    /// An [`DType::I32`] tensor of type `ty` holding `data` (row-major).
    pub fn from_i32(ty: TensorType, data: Vec<i32>) -> Result<Self> {
        if data.len() != ty.volume() {
            return Err(CoreError::DataLength { expected: ty.volume(), got: data.len(), ty });
        }
        Ok(Self::owned(ty, Storage::I32(data)))
    }

    /// An [`DType::I32`] tensor of indices drawn uniformly from `0..bound` (at least 1),
    /// reproducible from `seed`: valid token ids for a vocabulary of `bound`.
    pub fn random_indices(ty: TensorType, bound: usize, seed: u64) -> Self {
        let mut rng = SeededRng::new(seed);
        let bound = bound.clamp(1, i32::MAX as usize);
        let data = (0..ty.volume()).map(|_| rng.below(bound) as i32).collect();
        Self::owned(ty, Storage::I32(data))
    }

    /// The elements as `i32`, row-major: exact for an [`DType::I32`] tensor, and each value
    /// truncated toward zero (saturating, NaN as 0) for a floating-point one.
    pub fn to_i32(&self) -> Vec<i32> {
        match (self.data.storage.elems(), self.contiguous()) {
            (Elements::I32(v), Some(r)) => v[r].to_vec(),
            (Elements::I32(v), None) => {
                let mut out = vec![0; self.len()];
                copy_region(v, &self.data.frame, &mut out, &self.ty, &self.ty);
                out
            }
            _ => self.to_f32().into_iter().map(|x| x as i32).collect(),
        }
    }

    /// A tensor of type `ty` with every element equal to `value`.
    pub fn filled(ty: TensorType, dtype: DType, value: f32) -> Self {
        let data = vec![value; ty.volume()];
        Self::owned(ty, Storage::from_f32(dtype, data))
    }

    /// A tensor of uniform random values in `[-1, 1)`, reproducible from `seed`.
    pub fn random(ty: TensorType, dtype: DType, seed: u64) -> Self {
        let mut rng = SeededRng::new(seed);
        let data = (0..ty.volume()).map(|_| rng.uniform(-1.0, 1.0)).collect();
        Self::owned(ty, Storage::from_f32(dtype, data))
    }

    /// The tensor's type (its absolute index box).
    pub fn ty(&self) -> &TensorType {
        &self.ty
    }

    /// The storage dtype.
    pub fn dtype(&self) -> DType {
        self.data.storage.dtype()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.ty.volume()
    }

    /// True when the tensor holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of its elements.
    pub fn size_bytes(&self) -> usize {
        self.len() * self.dtype().size_bytes()
    }

    /// Where the tensor's elements lie in its block's storage when they are one contiguous
    /// run, row-major; `None` for a strided view.
    fn contiguous(&self) -> Option<Range<usize>> {
        contiguous_run(&self.ty, &self.data.frame)
    }

    /// Whether the elements are one contiguous run of memory, row-major (a compact tensor,
    /// or a view of whole rows): [`HostTensor::as_f32`] then borrows them when they are f32.
    pub fn is_contiguous(&self) -> bool {
        self.contiguous().is_some()
    }

    /// Whether `self` and `other` read the same block of memory (one is a view or a clone of
    /// the other, or both are views of one tensor).
    pub fn shares_elements(&self, other: &HostTensor) -> bool {
        Arc::ptr_eq(&self.data, &other.data)
    }

    /// Whether the elements lie in memory a backend lent ([`HostTensor::stitch_in`],
    /// [`HostTensor::aggregate_in`]) rather than the heap.
    pub fn is_lent(&self) -> bool {
        matches!(self.data.storage, Storage::Lent { .. })
    }

    /// The elements, row-major, borrowed when contiguous and gathered otherwise.
    fn with_elems<R>(&self, f: impl FnOnce(Elements<'_>) -> R) -> R {
        match self.contiguous() {
            Some(r) => f(self.data.storage.elems().range(r)),
            None => f(self.gathered().elems()),
        }
    }

    /// The elements gathered into a compact storage of the heap.
    fn gathered(&self) -> Storage {
        let mut out = Storage::zeros(self.dtype(), self.len());
        copy_elems(self.data.storage.elems(), &self.data.frame, out.elems_mut(), &self.ty, &self.ty);
        out
    }

    /// The elements as f32, row-major.
    pub fn to_f32(&self) -> Vec<f32> {
        self.with_elems(|e| e.to_f32())
    }

    /// The storage bytes, row-major and native-endian, in the tensor's own dtype (f16 and
    /// bf16 as their bit patterns): what a device buffer of this tensor holds. No element
    /// passes through f32, so every bit pattern (NaN payloads included) is kept.
    pub fn to_ne_bytes(&self) -> Vec<u8> {
        self.with_elems(|e| match e {
            Elements::F32(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
            Elements::F16(v) => v.iter().flat_map(|x| x.to_bits().to_ne_bytes()).collect(),
            Elements::BF16(v) => v.iter().flat_map(|x| x.to_bits().to_ne_bytes()).collect(),
            Elements::I32(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
        })
    }

    /// The storage bytes borrowed without a copy (row-major, native-endian, as
    /// [`to_ne_bytes`](Self::to_ne_bytes) gives them) when the elements are one contiguous
    /// run ([`HostTensor::is_contiguous`]); `None` for a strided view. What a transport sends
    /// straight from the block's memory.
    pub fn contiguous_ne_bytes(&self) -> Option<&[u8]> {
        self.elements().map(Elements::as_ne_bytes)
    }

    /// The tensor of type `ty` and dtype `dtype` whose storage bytes `fill` writes, in place,
    /// into a new zeroed block (as many bytes as the type's volume of elements takes): what a
    /// transport receives straight into a block's memory, with no copy after. `fill`'s error
    /// is returned as it is, and the block dropped.
    pub fn from_ne_bytes_with<E>(
        ty: TensorType,
        dtype: DType,
        fill: impl FnOnce(&mut [u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<Self, E> {
        let mut storage = Storage::zeros(dtype, ty.volume());
        fill(storage.elems_mut().into_ne_bytes())?;
        Ok(Self::owned(ty, storage))
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
            DType::I32 => {
                Storage::I32(bytes.chunks_exact(4).map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect())
            }
        };
        Ok(Self::owned(ty, data))
    }

    /// The f32 elements without a copy, when they are stored in f32 and contiguous
    /// ([`HostTensor::is_contiguous`]).
    pub fn as_f32(&self) -> Option<&[f32]> {
        match (self.data.storage.elems(), self.contiguous()) {
            (Elements::F32(v), Some(r)) => Some(&v[r]),
            _ => None,
        }
    }

    /// The elements without a copy, in their storage dtype, when they are one contiguous run
    /// ([`HostTensor::is_contiguous`]), so that a kernel can convert them piece by piece as it
    /// reads them (a GEMM panel, a chunk of an elementwise pass).
    pub fn elements(&self) -> Option<Elements<'_>> {
        self.contiguous().map(|r| self.data.storage.elems().range(r))
    }

    /// The element at an absolute index vector, if it lies in the tensor's box.
    pub fn get(&self, index: &[usize]) -> Option<f32> {
        if !self.ty.contains(index) {
            return None;
        }
        let frame = &self.data.frame;
        let at = offset(frame, &frame.strides(), index);
        Some(match self.data.storage.elems() {
            Elements::F32(v) => v[at],
            Elements::F16(v) => v[at].to_f32(),
            Elements::BF16(v) => v[at].to_f32(),
            Elements::I32(v) => v[at] as f32,
        })
    }

    /// The same elements, row-major, as a tensor of type `ty` of the same volume: a reshape
    /// (a checkpoint's `[heads·d_head, d_model]` matrix as `[heads, d_head, d_model]`, say).
    /// Moves the elements when the tensor is compact and nothing else shares them, and copies
    /// them otherwise. A volume that differs is [`CoreError::DataLength`].
    pub fn reshaped(self, ty: TensorType) -> Result<HostTensor> {
        if ty.volume() != self.len() {
            return Err(CoreError::DataLength { expected: ty.volume(), got: self.len(), ty });
        }
        let compact = if self.ty == self.data.frame { self } else { self.slice(&self.ty.clone())? };
        if compact.ty == compact.data.frame && !compact.is_lent() {
            return match Arc::try_unwrap(compact.data) {
                Ok(block) => Ok(Self::owned(ty, block.storage)),
                Err(data) => {
                    let whole = HostTensor { ty: data.frame.clone(), data };
                    Self::from_ne_bytes(ty, whole.dtype(), &whole.to_ne_bytes())
                }
            };
        }
        Self::from_ne_bytes(ty, compact.dtype(), &compact.to_ne_bytes())
    }

    /// The same values stored in another dtype.
    pub fn cast(&self, dtype: DType) -> HostTensor {
        if dtype == self.dtype() {
            return self.clone();
        }
        Self::owned(self.ty.clone(), Storage::from_f32(dtype, self.to_f32()))
    }

    /// The restriction of this tensor to `part` (Definition 3.5), which must be a projection
    /// of its type; the result keeps `part`'s absolute bounds. A part that is one contiguous
    /// run of the elements (the whole tensor, a range of rows) is a view sharing them; any
    /// other is copied into a compact tensor.
    pub fn slice(&self, part: &TensorType) -> Result<HostTensor> {
        let view = self.view(part)?;
        Ok(if view.is_contiguous() { view } else { view.compact() })
    }

    /// The restriction of this tensor to `part`, as [`HostTensor::slice`], but always a view
    /// sharing the elements (no copy), strided when the part is not one contiguous run: for
    /// a reader that reads it once or reads strided (a stitch, an aggregation), where
    /// compacting first would copy the elements twice.
    pub fn view(&self, part: &TensorType) -> Result<HostTensor> {
        part.check_projection_of(&self.ty)?;
        Ok(HostTensor { ty: part.clone(), data: Arc::clone(&self.data) })
    }

    /// The tensor as a compact one of the heap: itself when it already is, its elements
    /// gathered into a new block otherwise (a view, or lent memory that its lender must get
    /// back, say for a result handed to the caller).
    pub fn compact(&self) -> HostTensor {
        if self.ty == self.data.frame && !self.is_lent() {
            return self.clone();
        }
        Self::owned(self.ty.clone(), self.gathered())
    }

    /// [`HostTensor::compact`], gathering into `lease` when one is given (an error if it is
    /// too small) rather than a new vector.
    pub fn compact_in(&self, lease: Option<Lease>) -> Result<HostTensor> {
        if lease.is_none() {
            return Ok(self.compact());
        }
        let mut out = Storage::place(lease, &self.ty, self.dtype(), self.len())?;
        copy_elems(self.data.storage.elems(), &self.data.frame, out.elems_mut(), &self.ty, &self.ty);
        Ok(Self::owned(self.ty.clone(), out))
    }

    /// The tensor of type `whole` that agrees with every part: the recompose step of
    /// Definition 3.7. The parts must tile `whole` and share one dtype. One part, or parts
    /// that are all views of one tensor, make a view (no copy); otherwise the parts are
    /// copied into a new block.
    pub fn stitch(whole: &TensorType, parts: &[HostTensor]) -> Result<HostTensor> {
        Self::stitch_in(whole, parts, None)
    }

    /// [`HostTensor::stitch`], copying the parts (when they must be copied) into `lease`
    /// rather than a new vector; the lease is dropped unused when the result is a view. An
    /// error if the lease is too small for `whole`.
    pub fn stitch_in(whole: &TensorType, parts: &[HostTensor], lease: Option<Lease>) -> Result<HostTensor> {
        let types: Vec<TensorType> = parts.iter().map(|p| p.ty.clone()).collect();
        check_tiling(whole, &types)?;
        if let [only] = parts {
            // One part tiling the whole is the whole: share it.
            return Ok(only.clone());
        }
        let dtype = parts.first().map_or(DType::F32, HostTensor::dtype);
        if let Some(p) = parts.iter().find(|p| p.dtype() != dtype) {
            return Err(mismatch("stitch", &parts[0], p));
        }
        if let Some(first) = parts.first()
            && parts.iter().all(|p| first.shares_elements(p))
            && whole.is_projection_of(&first.data.frame)
        {
            // Views of one block, tiling `whole`: the whole is a view of that block too.
            return Ok(HostTensor { ty: whole.clone(), data: Arc::clone(&first.data) });
        }
        let mut out = Storage::place(lease, whole, dtype, whole.volume())?;
        for p in parts {
            copy_elems(p.data.storage.elems(), &p.data.frame, out.elems_mut(), whole, &p.ty);
        }
        Ok(Self::owned(whole.clone(), out))
    }

    /// Elementwise `self ⊕ other`, for tensors of one type and dtype (computed in f32).
    pub fn aggregate(&self, other: &HostTensor, agg: Aggregation) -> Result<HostTensor> {
        Self::aggregate_in(self, std::slice::from_ref(other), agg, None)
    }

    /// `first ⊕ rest[0] ⊕ rest[1] ⊕ ...`, folded left to right in f32 and rounded to the
    /// dtype after every step, so that the bits equal those of repeated
    /// [`HostTensor::aggregate`]; written into `lease` when one is given, else a new vector.
    /// The sources share a type and dtype; strided views are read in place.
    pub fn aggregate_in(
        first: &HostTensor,
        rest: &[HostTensor],
        agg: Aggregation,
        lease: Option<Lease>,
    ) -> Result<HostTensor> {
        if let Some(s) = rest.iter().find(|s| s.ty != first.ty || s.dtype() != first.dtype()) {
            return Err(mismatch("aggregate", first, s));
        }
        let (ty, dtype) = (&first.ty, first.dtype());
        let srcs: Vec<&HostTensor> = std::iter::once(first).chain(rest).collect();
        if !agg.is_elementwise() {
            return Self::aggregate_rows(&srcs, agg, lease);
        }
        let mut out = Storage::place(lease, ty, dtype, ty.volume())?;
        let strided = srcs.iter().any(|s| !s.is_contiguous());
        match out.elems_mut() {
            // f32 views read in place, one run of the last dimension at a time: no gather.
            ElemsMut::F32(o) if strided => {
                let layouts: Vec<(&[f32], &TensorType, Vec<usize>)> = srcs
                    .iter()
                    .map(|s| match s.data.storage.elems() {
                        Elements::F32(v) => (v, &s.data.frame, s.data.frame.strides()),
                        _ => unreachable!("checked: every source has the output's dtype, f32"),
                    })
                    .collect();
                let mut runs: Vec<&[f32]> = Vec::with_capacity(layouts.len());
                for_each_run(ty, |at, idx, run| {
                    runs.clear();
                    runs.extend(layouts.iter().map(|(v, frame, strides)| {
                        let (v, from): (&[f32], usize) = (v, offset(frame, strides, idx));
                        &v[from..from + run]
                    }));
                    fold(&mut o[at..at + run], &runs, agg, dtype);
                });
            }
            out => {
                let values: Vec<Cow<'_, [f32]>> =
                    srcs.iter().map(|s| s.as_f32().map_or_else(|| Cow::Owned(s.to_f32()), Cow::Borrowed)).collect();
                let values: Vec<&[f32]> = values.iter().map(|v| &v[..]).collect();
                let values = &values[..];
                match out {
                    ElemsMut::F32(o) => fold(o, values, agg, dtype),
                    ElemsMut::F16(o) => {
                        let mut acc = vec![0.0; o.len()];
                        fold(&mut acc, values, agg, dtype);
                        o.convert_from_f32_slice(&acc);
                    }
                    ElemsMut::BF16(o) => {
                        let mut acc = vec![0.0; o.len()];
                        fold(&mut acc, values, agg, dtype);
                        o.convert_from_f32_slice(&acc);
                    }
                    ElemsMut::I32(o) => {
                        let mut acc = vec![0.0; o.len()];
                        fold(&mut acc, values, agg, dtype);
                        o.iter_mut().zip(&acc).for_each(|(o, &a)| *o = a as i32);
                    }
                }
            }
        }
        Ok(Self::owned(ty.clone(), out))
    }

    /// The row-wise aggregations ([`Aggregation::Softmax`]): every row along the last index
    /// (the values, then the statistics column) of `srcs[0]` merged with the same row of
    /// each next source ([`merge_softmax_rows`](crate::merge_softmax_rows)), in f32, rounded
    /// to the dtype after every step as the elementwise fold is. A rank-0 block has no row
    /// and is refused with [`CoreError::RankMismatch`].
    fn aggregate_rows(srcs: &[&HostTensor], agg: Aggregation, lease: Option<Lease>) -> Result<HostTensor> {
        let (ty, dtype) = (&srcs[0].ty, srcs[0].dtype());
        let Some(last) = ty.rank().checked_sub(1) else {
            return Err(CoreError::RankMismatch {
                what: format!("a block aggregated by rows with {agg}"),
                expected: 1,
                got: 0,
            });
        };
        let width = ty.dim(last).len();
        let mut acc = srcs[0].to_f32();
        let round = |v: &mut [f32]| match dtype {
            DType::F32 => {}
            DType::F16 => v.iter_mut().for_each(|x| *x = f16::from_f32(*x).to_f32()),
            DType::BF16 => v.iter_mut().for_each(|x| *x = bf16::from_f32(*x).to_f32()),
            DType::I32 => v.iter_mut().for_each(|x| *x = *x as i32 as f32),
        };
        for s in &srcs[1..] {
            let v = s.to_f32();
            if width > 0 {
                for (a, b) in acc.chunks_exact_mut(width).zip(v.chunks_exact(width)) {
                    crate::merge_softmax_rows(a, b);
                    round(a);
                }
            }
        }
        let mut out = Storage::place(lease, ty, dtype, ty.volume())?;
        match out.elems_mut() {
            ElemsMut::F32(o) => o.copy_from_slice(&acc),
            ElemsMut::F16(o) => o.convert_from_f32_slice(&acc),
            ElemsMut::BF16(o) => o.convert_from_f32_slice(&acc),
            ElemsMut::I32(o) => o.iter_mut().zip(&acc).for_each(|(o, &a)| *o = a as i32),
        }
        Ok(Self::owned(ty.clone(), out))
    }
}

/// Where the elements of block `part` lie in a row-major block over `frame` (which contains
/// it) when they form one contiguous run: `part` spans `frame` whole in every dimension
/// after some dimension `d`, and holds a single index in every dimension before it (a range
/// of rows, say). `None` when they do not (a range of columns).
pub fn contiguous_run(part: &TensorType, frame: &TensorType) -> Option<Range<usize>> {
    if part.is_empty() {
        return Some(0..0);
    }
    if part == frame {
        return Some(0..part.volume());
    }
    // The last dimension the part does not span whole.
    let partial = (0..part.rank()).rev().find(|&d| part.dim(d) != frame.dim(d))?;
    if (0..partial).all(|d| part.dim(d).len() == 1) {
        let start = offset(frame, &frame.strides(), &part.lower());
        Some(start..start + part.volume())
    } else {
        None
    }
}

/// `acc = v0 ⊕ v1 ⊕ ...` over the slices `values` (one at least), left to right, rounding
/// to `dtype` after every step; a chunk of `acc` at a time, so that it stays in the cache
/// while every source is folded into it.
fn fold(acc: &mut [f32], values: &[&[f32]], agg: Aggregation, dtype: DType) {
    const CHUNK: usize = 4096;
    for (c, acc) in acc.chunks_mut(CHUNK).enumerate() {
        let r = c * CHUNK..c * CHUNK + acc.len();
        match values {
            [] => {}
            [only] => acc.copy_from_slice(&only[r]),
            [a, b, more @ ..] => {
                combine(acc, &a[r.clone()], &b[r.clone()], agg, dtype);
                for v in more {
                    combine_into(acc, &v[r.clone()], agg, dtype);
                }
            }
        }
    }
}

/// Calls `f(at, idx, run)` for every run of `region` along its last dimension, in row-major
/// order: `at` is the run's offset in a compact block of `region`, `idx` the absolute index
/// of its first element, `run` its length.
fn for_each_run(region: &TensorType, mut f: impl FnMut(usize, &[usize], usize)) {
    if region.is_empty() {
        return;
    }
    let rank = region.rank();
    if rank == 0 {
        return f(0, &[], 1);
    }
    let run = region.dim(rank - 1).len();
    let mut idx = region.lower();
    let mut at = 0;
    loop {
        f(at, &idx, run);
        at += run;
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

/// `out[i] = round(a[i] ⊕ b[i])`, rounding to `dtype`. The operation and the dtype are
/// chosen outside the loop, so that each loop is compiled (and vectorized) on its own.
fn combine(out: &mut [f32], a: &[f32], b: &[f32], agg: Aggregation, dtype: DType) {
    #[inline(always)]
    fn each(out: &mut [f32], a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32) {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = f(x, y);
        }
    }
    match (agg, dtype) {
        (Aggregation::Sum, DType::F32) => each(out, a, b, |x, y| x + y),
        (Aggregation::Max, DType::F32) => each(out, a, b, |x, y| Aggregation::Max.apply(x, y)),
        (Aggregation::Min, DType::F32) => each(out, a, b, |x, y| Aggregation::Min.apply(x, y)),
        (Aggregation::Product, DType::F32) => each(out, a, b, |x, y| x * y),
        (Aggregation::Softmax, _) => unreachable!("row-wise aggregations take aggregate_rows"),
        (agg, DType::F16) => each(out, a, b, |x, y| f16::from_f32(agg.apply(x, y)).to_f32()),
        (agg, DType::BF16) => each(out, a, b, |x, y| bf16::from_f32(agg.apply(x, y)).to_f32()),
        (agg, DType::I32) => each(out, a, b, |x, y| agg.apply(x, y) as i32 as f32),
    }
}

/// `acc[i] = round(acc[i] ⊕ v[i])`, as [`combine`].
fn combine_into(acc: &mut [f32], v: &[f32], agg: Aggregation, dtype: DType) {
    #[inline(always)]
    fn each(acc: &mut [f32], v: &[f32], f: impl Fn(f32, f32) -> f32) {
        for (a, &x) in acc.iter_mut().zip(v) {
            *a = f(*a, x);
        }
    }
    match (agg, dtype) {
        (Aggregation::Sum, DType::F32) => each(acc, v, |x, y| x + y),
        (Aggregation::Max, DType::F32) => each(acc, v, |x, y| Aggregation::Max.apply(x, y)),
        (Aggregation::Min, DType::F32) => each(acc, v, |x, y| Aggregation::Min.apply(x, y)),
        (Aggregation::Product, DType::F32) => each(acc, v, |x, y| x * y),
        (Aggregation::Softmax, _) => unreachable!("row-wise aggregations take aggregate_rows"),
        (agg, DType::F16) => each(acc, v, |x, y| f16::from_f32(agg.apply(x, y)).to_f32()),
        (agg, DType::BF16) => each(acc, v, |x, y| bf16::from_f32(agg.apply(x, y)).to_f32()),
        (agg, DType::I32) => each(acc, v, |x, y| agg.apply(x, y) as i32 as f32),
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

/// The position of absolute index `idx` in a row-major block over `frame`.
fn offset(frame: &TensorType, strides: &[usize], idx: &[usize]) -> usize {
    idx.iter().zip(frame.dims()).zip(strides).map(|((&i, d), s)| (i - d.lo) * s).sum()
}

/// Copies the elements of `region` from `src` (laid out over `src_ty`) into `dst` (laid out
/// over `dst_ty`). `region` lies within both types; the elements share a dtype.
fn copy_elems(src: Elements<'_>, src_ty: &TensorType, dst: ElemsMut<'_>, dst_ty: &TensorType, region: &TensorType) {
    match (src, dst) {
        (Elements::F32(s), ElemsMut::F32(d)) => copy_region(s, src_ty, d, dst_ty, region),
        (Elements::F16(s), ElemsMut::F16(d)) => copy_region(s, src_ty, d, dst_ty, region),
        (Elements::BF16(s), ElemsMut::BF16(d)) => copy_region(s, src_ty, d, dst_ty, region),
        (Elements::I32(s), ElemsMut::I32(d)) => copy_region(s, src_ty, d, dst_ty, region),
        _ => unreachable!("callers check that the dtypes agree"),
    }
}

fn copy_region<T: Copy>(src: &[T], src_ty: &TensorType, dst: &mut [T], dst_ty: &TensorType, region: &TensorType) {
    let (ss, ds) = (src_ty.strides(), dst_ty.strides());
    for_each_run(region, |_, idx, run| {
        let (so, dof) = (offset(src_ty, &ss, idx), offset(dst_ty, &ds, idx));
        dst[dof..dof + run].copy_from_slice(&src[so..so + run]);
    });
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
mod tests;
