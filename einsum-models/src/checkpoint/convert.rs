//! Stored little-endian elements converted once into a tensor's storage dtype.
//!
//! Every conversion writes straight into the result's one vector: f16 and bf16 widen to f32
//! exactly, and f32 narrows to f16 or bf16 rounding to nearest, ties to even, as the `half`
//! crate does (f16 ↔ bf16 goes through f32, which holds both exactly, so it rounds once).
//! The bytes are consumed a chunk at a time and each finished chunk is handed to `done`,
//! which lets the caller drop the file's pages it has read while the rest converts.

use std::ops::Range;

use einsum_core::DType;
use half::{bf16, f16};

/// How many stored bytes are converted between two calls of `done`: large enough that the
/// calls cost nothing, small enough that the file pages still mapped stay a few megabytes.
const CHUNK_BYTES: usize = 16 << 20;

/// The elements of `bytes` (stored as `stored`, little-endian) converted to `target`; `None`
/// when either is an integer dtype. `done` receives each range of `bytes` once it is converted.
pub(super) fn convert(bytes: &[u8], stored: DType, target: DType, done: impl FnMut(Range<usize>)) -> Option<Converted> {
    Some(match (stored, target) {
        (DType::F32, DType::F32) => Converted::F32(decode(bytes, done, f32_at)),
        (DType::F16, DType::F32) => Converted::F32(decode(bytes, done, |c| f16_at(c).to_f32())),
        (DType::BF16, DType::F32) => Converted::F32(decode(bytes, done, |c| bf16_at(c).to_f32())),
        (DType::F32, DType::F16) => Converted::F16(decode(bytes, done, |c| f16::from_f32(f32_at(c)))),
        (DType::F16, DType::F16) => Converted::F16(decode(bytes, done, f16_at)),
        (DType::BF16, DType::F16) => Converted::F16(decode(bytes, done, |c| f16::from_f32(bf16_at(c).to_f32()))),
        (DType::F32, DType::BF16) => Converted::BF16(decode(bytes, done, |c| bf16::from_f32(f32_at(c)))),
        (DType::F16, DType::BF16) => Converted::BF16(decode(bytes, done, |c| bf16::from_f32(f16_at(c).to_f32()))),
        (DType::BF16, DType::BF16) => Converted::BF16(decode(bytes, done, bf16_at)),
        (_, DType::I32) | (DType::I32, _) => return None,
    })
}

/// The result of [`convert`]: one vector in the target dtype.
pub(super) enum Converted {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
}

/// Elements of `N` bytes each decoded by `f` into a vector allocated once.
fn decode<T, const N: usize>(bytes: &[u8], mut done: impl FnMut(Range<usize>), f: impl Fn(&[u8; N]) -> T) -> Vec<T> {
    let mut out = Vec::with_capacity(bytes.len() / N);
    // CHUNK_BYTES is a multiple of every element size, so no element straddles two chunks
    // (and the caller passes whole elements, so no chunk leaves a remainder).
    for (i, chunk) in bytes.chunks(CHUNK_BYTES).enumerate() {
        out.extend(chunk.as_chunks::<N>().0.iter().map(&f));
        let start = i * CHUNK_BYTES;
        done(start..start + chunk.len());
    }
    out
}

fn f32_at(c: &[u8; 4]) -> f32 {
    f32::from_le_bytes(*c)
}

fn f16_at(c: &[u8; 2]) -> f16 {
    f16::from_bits(u16::from_le_bytes(*c))
}

fn bf16_at(c: &[u8; 2]) -> bf16 {
    bf16::from_bits(u16::from_le_bytes(*c))
}
