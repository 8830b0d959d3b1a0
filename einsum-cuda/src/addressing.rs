//! How the memory-bound kernels address memory, decided once per operation at lowering
//! ([`crate::work::DeviceWork::specialize`]), on the host, where every shape, stride and pointer offset is known:
//!
//! - **Dimension coalescing** ([`coalesce`]): extent-1 dimensions are dropped and adjacent
//!   dimensions that are contiguous in every addressed tensor are merged, so most copies and
//!   elementwise operations iterate a rank-1 or rank-2 space (one or two div/mod per element
//!   instead of one per dimension).
//! - **Index width** ([`Index`]): when the volume and every offset a space produces fit in 31
//!   bits, the kernel instantiated with 32-bit index arithmetic is launched (its div/mod are
//!   a few instructions instead of a 64-bit division subroutine).
//! - **16-byte vector accesses** ([`Access::Vector`]): a rank-1, unit-stride space whose
//!   pointers are 16-byte aligned moves 16 bytes per thread (4 f32 or 8 16-bit values), with
//!   a scalar tail.
//!
//! Alignment is decided from [`Ptr::offset`] alone: every space's base is aligned to at least
//! 16 bytes (pool and resident allocations to [`crate::pool::ALIGN`], constant tables
//! by `cuMemAlloc`, pinned outputs by `cuMemHostAlloc`, both to at least 256 bytes). The
//! emulator ([`crate::emulate`]) checks every decision against the memory layout it emulates.

use crate::lower::{Dims, MAX_RANK, Ptr};

/// Bytes one thread moves on a vector path.
pub const VECTOR_BYTES: usize = 16;

// Every space base is at least `VECTOR_BYTES`-aligned: pool and resident offsets are multiples
// of `pool::ALIGN`.
const _: () = assert!(crate::pool::ALIGN.is_multiple_of(VECTOR_BYTES));

/// The largest index or offset (in elements) the 32-bit kernels may compute. Their index
/// arithmetic is unsigned 32-bit; staying below 2³¹ leaves room for the grid stride
/// (at most 2²⁴ threads) to step past the end without wrapping.
pub const NARROW_LIMIT: u64 = i32::MAX as u64;

/// The width of a strided kernel's index arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Index {
    /// 32-bit (unsigned): the volume and every offset are at most [`NARROW_LIMIT`].
    I32,
    /// 64-bit.
    I64,
}

/// How a copy or binary operation addresses its tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Strided, through the space's `Dims`, with index arithmetic of the given width.
    Strided(Index),
    /// Rank 1 with unit strides in every tensor and 16-byte aligned pointers:
    /// [`VECTOR_BYTES`] per thread.
    Vector,
}

impl Access {
    /// What an operation is built with before it is specialized
    /// ([`crate::work::DeviceWork::specialize`]): the general path.
    pub const GENERAL: Access = Access::Strided(Index::I64);
}

/// The kernel of a strided-or-vector operation's variant: `wide` (64-bit strided), `narrow`
/// (32-bit strided) or `vector`.
pub(crate) fn strided_name(
    access: Access,
    wide: &'static str,
    narrow: &'static str,
    vector: &'static str,
) -> &'static str {
    match access {
        Access::Strided(Index::I64) => wide,
        Access::Strided(Index::I32) => narrow,
        Access::Vector => vector,
    }
}

/// The offsets (in elements) of linear index `i` of `d`'s row-major space in its three
/// stride vectors: the host twin of `offsets` in `common.cuh`.
pub fn offsets(d: &Dims, mut i: usize) -> [usize; 3] {
    let mut o = [0usize; 3];
    for k in (0..d.rank as usize).rev() {
        let n = d.shape[k] as usize;
        let x = i % n;
        i /= n;
        o[0] += x * d.s0[k] as usize;
        o[1] += x * d.s1[k] as usize;
        o[2] += x * d.s2[k] as usize;
    }
    o
}

/// The same iteration space with extent-1 dimensions dropped and adjacent dimensions merged
/// where they are contiguous in all three stride vectors (the outer stride is the inner one
/// times the inner extent; a vector unused by the kernel is all zeros, which never prevents
/// a merge). Linear index `i` of the result addresses exactly the offsets index `i` of `d`
/// does. An empty space becomes `[0]`; a space of one element becomes `[1]` (unit strides,
/// which never matter for one element), so the result always has rank at least 1.
pub fn coalesce(d: &Dims) -> Dims {
    let rank = d.rank as usize;
    let mut out =
        Dims { rank: 0, pad: 0, shape: [1; MAX_RANK], s0: [0; MAX_RANK], s1: [0; MAX_RANK], s2: [0; MAX_RANK] };
    if d.shape[..rank].contains(&0) {
        out.rank = 1;
        out.shape[0] = 0;
        return out;
    }
    let mut r = 0usize;
    for k in 0..rank {
        let (n, s) = (d.shape[k], [d.s0[k], d.s1[k], d.s2[k]]);
        if n == 1 {
            continue;
        }
        if r > 0 {
            let inner = r - 1;
            let prev = [out.s0[inner], out.s1[inner], out.s2[inner]];
            // Dimension k is inner to the merged `inner`: merging needs outer = inner stride ×
            // inner extent, with `inner` the outer one of the pair.
            if (0..3).all(|j| prev[j] == s[j] * n) {
                out.shape[inner] *= n;
                out.s0[inner] = s[0];
                out.s1[inner] = s[1];
                out.s2[inner] = s[2];
                continue;
            }
        }
        out.shape[r] = n;
        out.s0[r] = s[0];
        out.s1[r] = s[1];
        out.s2[r] = s[2];
        r += 1;
    }
    if r == 0 {
        out.shape[0] = 1;
        out.s0[0] = 1;
        out.s1[0] = 1;
        out.s2[0] = 1;
        r = 1;
    }
    out.rank = r as i32;
    out
}

/// The largest offset `d` produces in each of its three stride vectors (0 for an empty
/// space), in wide arithmetic so that no input overflows.
fn max_offsets(d: &Dims) -> [u128; 3] {
    let rank = d.rank as usize;
    if d.shape[..rank].contains(&0) {
        return [0; 3];
    }
    let mut m = [0u128; 3];
    for k in 0..rank {
        let reach = (d.shape[k] - 1) as u128;
        m[0] += reach * d.s0[k] as u128;
        m[1] += reach * d.s1[k] as u128;
        m[2] += reach * d.s2[k] as u128;
    }
    m
}

/// The index width a strided space needs: [`Index::I32`] when its volume and every offset it
/// produces are at most [`NARROW_LIMIT`].
pub fn index_width(d: &Dims) -> Index {
    let volume: u128 = d.shape[..d.rank as usize].iter().map(|&n| n as u128).product();
    narrow_if(volume <= NARROW_LIMIT as u128 && max_offsets(d).iter().all(|&m| m <= NARROW_LIMIT as u128))
}

/// The index width of a reduction: both spaces' volumes, and the sums `keep` + `over` of
/// their input offsets and `keep`'s output offsets, at most [`NARROW_LIMIT`].
pub(crate) fn reduce_index_width(keep: &Dims, over: &Dims) -> Index {
    let limit = NARROW_LIMIT as u128;
    let volume = |d: &Dims| d.shape[..d.rank as usize].iter().map(|&n| n as u128).product::<u128>();
    let (k, o) = (max_offsets(keep), max_offsets(over));
    narrow_if(volume(keep) <= limit && volume(over) <= limit && k[0] + o[0] <= limit && k[1] <= limit)
}

fn narrow_if(fits: bool) -> Index {
    if fits { Index::I32 } else { Index::I64 }
}

/// Whether `p` is [`VECTOR_BYTES`]-aligned on the device (see the module docs).
pub fn aligned(p: &Ptr) -> bool {
    p.offset.is_multiple_of(VECTOR_BYTES)
}

/// Whether a coalesced space is rank 1 with unit strides in the first `tensors` vectors.
fn unit_rank1(d: &Dims, tensors: usize) -> bool {
    d.rank == 1 && [d.s0[0], d.s1[0], d.s2[0]][..tensors].iter().all(|&s| s == 1)
}

/// The access of a coalesced space over `tensors` tensors at `ptrs`.
pub(crate) fn access(d: &Dims, tensors: usize, ptrs: &[&Ptr]) -> Access {
    if unit_rank1(d, tensors) && ptrs.iter().all(|p| aligned(p)) {
        Access::Vector
    } else {
        Access::Strided(index_width(d))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::lower::Space;
    use crate::work::{Aggregate, Binary, BoxCopy, DeviceWork};

    fn dims(shape: &[usize], s0: &[usize], s1: &[usize], s2: &[usize]) -> Dims {
        Dims::new(shape, [s0, s1, s2]).unwrap()
    }

    fn every_offset(d: &Dims) -> Vec<[usize; 3]> {
        (0..d.volume()).map(|i| offsets(d, i)).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The coalesced space addresses exactly the original's (offset0, offset1, offset2)
        /// sequence, for shapes with extent-0 and extent-1 dimensions, broadcasts (stride 0)
        /// and contiguous, permuted and padded strides.
        #[test]
        fn coalescing_keeps_the_offset_sequence(
            shape in proptest::collection::vec(0usize..4, 0..6),
            picks in proptest::collection::vec((0usize..4, 0usize..4, 0usize..4), 6),
            seed in 0usize..1000,
        ) {
            let r = shape.len();
            // Each tensor's strides: row-major of the shape (contiguous), of a padded shape,
            // broadcast (0), or arbitrary, chosen per dimension.
            let mut vectors = [vec![0; r], vec![0; r], vec![0; r]];
            for (j, v) in vectors.iter_mut().enumerate() {
                let mut running = 1 + seed % (j + 2);
                for k in (0..r).rev() {
                    let pick = [picks[k].0, picks[k].1, picks[k].2][j];
                    v[k] = match pick {
                        0 => running,
                        1 => 0,
                        2 => running + 1,
                        _ => (seed + 7 * k + 3 * j) % 11,
                    };
                    running = v[k].max(1) * shape[k].max(1);
                }
            }
            let d = dims(&shape, &vectors[0], &vectors[1], &vectors[2]);
            let c = coalesce(&d);
            prop_assert!(c.rank >= 1 && c.rank <= d.rank.max(1));
            prop_assert_eq!(every_offset(&c), every_offset(&d));
            prop_assert_eq!(coalesce(&c), c);
        }
    }

    #[test]
    fn contiguous_spaces_become_rank_1_and_permutations_do_not() {
        let row_major = dims(&[2, 3, 4], &[12, 4, 1], &[12, 4, 1], &[]);
        let c = coalesce(&row_major);
        assert_eq!((c.rank, c.shape[0], c.s0[0], c.s1[0]), (1, 24, 1, 1));
        // A transpose of the two inner dimensions merges only the outer pair when the source
        // keeps it contiguous: [2, 3, 4] read with strides [12, 1, 3] stays rank 3.
        let t = coalesce(&dims(&[2, 3, 4], &[12, 1, 3], &[12, 4, 1], &[]));
        assert_eq!(t.rank, 3);
        // A broadcast operand merges with itself: [5, 1, 6] against a [6] bias.
        let b = coalesce(&dims(&[5, 1, 6], &[6, 6, 1], &[0, 0, 1], &[6, 6, 1]));
        assert_eq!((b.rank, &b.shape[..2]), (2, &[5, 6][..]));
    }

    #[test]
    fn the_index_width_is_32_bits_only_when_every_offset_fits() {
        let small = dims(&[1 << 20], &[1], &[1], &[]);
        assert_eq!(index_width(&small), Index::I32);
        // An offset past 2^31 keeps 64-bit: two elements 2^31 apart.
        let far = dims(&[2], &[1 << 31], &[1], &[]);
        assert_eq!(index_width(&far), Index::I64);
        let at_limit = dims(&[2], &[NARROW_LIMIT as usize], &[1], &[]);
        assert_eq!(index_width(&at_limit), Index::I32);
        // A volume past 2^31 keeps 64-bit even with broadcast offsets.
        let big = dims(&[1 << 16, 1 << 16], &[0, 0], &[0, 0], &[]);
        assert_eq!(index_width(&big), Index::I64);
        // A reduction's input offset is keep's plus over's.
        let keep = dims(&[2], &[1 << 30], &[1], &[]);
        let over = dims(&[2], &[1 << 30], &[], &[]);
        assert_eq!(reduce_index_width(&keep, &over), Index::I64);
        assert_eq!(reduce_index_width(&keep, &dims(&[2], &[1], &[], &[])), Index::I32);
    }

    fn ptr(offset: usize) -> Ptr {
        Ptr { space: Space::Buffer(0), offset }
    }

    fn copy(src: usize, dst: usize, d: Dims) -> BoxCopy {
        BoxCopy { src: ptr(src), dst: ptr(dst), dtype: einsum_core::DType::F16, dims: d, access: Access::GENERAL }
    }

    #[test]
    fn the_vector_path_needs_unit_strides_and_aligned_pointers() {
        let contiguous = dims(&[4, 6], &[6, 1], &[6, 1], &[]);
        let mut op = copy(32, 64, contiguous);
        op.specialize();
        assert_eq!((op.access, op.dims.rank, op.dims.shape[0]), (Access::Vector, 1, 24));
        // A misaligned offset (a stitch into the middle of a row) keeps the scalar path.
        let mut op = copy(32, 66, contiguous);
        op.specialize();
        assert_eq!(op.access, Access::Strided(Index::I32), "{op:?}");
        // A permutation is strided however aligned.
        let mut op = copy(0, 0, dims(&[4, 6], &[1, 4], &[6, 1], &[]));
        op.specialize();
        assert_eq!(op.access, Access::Strided(Index::I32), "{op:?}");
        // A broadcast binary operand is strided; same-shape operands are vectors.
        let bias = dims(&[4, 6], &[6, 1], &[0, 1], &[6, 1]);
        let dims_of_same_shape = dims(&[4, 6], &[6, 1], &[6, 1], &[6, 1]);
        let mut op = Binary {
            a: ptr(0),
            b: ptr(0),
            y: ptr(0),
            dtype: einsum_core::DType::F32,
            op: einsum_ops::binary::BinaryOp::Add,
            dims: bias,
            access: Access::GENERAL,
        };
        op.specialize();
        assert_eq!(op.access, Access::Strided(Index::I32), "{op:?}");
        op.dims = dims_of_same_shape;
        op.access = Access::GENERAL;
        op.specialize();
        assert_eq!(op.access, Access::Vector, "{op:?}");
        let mut agg = Aggregate {
            srcs: vec![ptr(0), ptr(256), ptr(8)],
            accumulate: false,
            out: ptr(512),
            dtype: einsum_core::DType::F32,
            agg: einsum_core::Aggregation::Sum,
            n: 64,
            vector: true,
        };
        agg.specialize();
        assert!(!agg.vector, "one misaligned source: {agg:?}");
    }
}
