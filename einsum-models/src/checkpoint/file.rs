//! One safetensors file, memory-mapped, its header checked before anything in it is trusted.
//!
//! The format: an 8-byte little-endian header length `n`, `n` bytes of JSON mapping each
//! tensor's name to its dtype, shape and data offsets (relative to the data section, which
//! follows the header), then the data section, the tensors' bytes back to back in C order.
//! [`ShardFile::open`] checks the length against the file before reading the header (a
//! hostile length allocates nothing), each tensor's byte count against its shape and dtype,
//! that the tensors tile the data section without overlap or gap, and that the file holds
//! all of it (a short file names the first tensor that does not fit); then it hands the
//! whole mapping to [`SafeTensors::read_metadata`], the reference parser, as a last check.

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::SafeTensors;
use safetensors::tensor::TensorInfo as HeaderEntry;
use serde_json::Value;

use super::unique_map::UniqueMap;
use super::{CheckpointError, StoredDtype};

/// The size of the header-length field.
const LENGTH_BYTES: usize = 8;

/// The largest header the safetensors crate accepts (its `MAX_HEADER_SIZE`): a longer one is
/// refused before its bytes are read.
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// The key of the header's free-form string metadata, which names no tensor.
const METADATA_KEY: &str = "__metadata__";

/// A tensor as one file's header describes it, its bytes located in the mapping.
#[derive(Debug)]
pub(super) struct StoredTensor {
    pub name: String,
    pub dtype: StoredDtype,
    pub shape: Vec<usize>,
    /// Its bytes, as offsets into the whole file (and so into the mapping).
    pub bytes: Range<usize>,
}

/// A validated, memory-mapped safetensors file.
#[derive(Debug)]
pub(super) struct ShardFile {
    path: PathBuf,
    map: Mmap,
}

impl ShardFile {
    /// Maps the file at `path` and checks its header; the tensors it holds, in file order.
    pub fn open(path: &Path) -> Result<(Self, Vec<StoredTensor>), CheckpointError> {
        let io = |source| CheckpointError::Io { path: path.to_owned(), source };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < LENGTH_BYTES as u64 {
            return Err(header(path, format!("the file has {len} bytes, fewer than the 8-byte header length")));
        }
        // SAFETY: the mapping is read-only. Its contents stay valid as long as nobody
        // truncates or rewrites the file while the checkpoint is open, the contract every
        // memory-mapped loader has (documented on `Checkpoint`).
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let shard = ShardFile { path: path.to_owned(), map };
        let tensors = shard.parse_header()?;
        Ok((shard, tensors))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bytes of `range` (a [`StoredTensor::bytes`] of this file).
    pub fn bytes(&self, range: Range<usize>) -> &[u8] {
        &self.map[range]
    }

    /// Asks the kernel to start reading `range` into the page cache (best effort).
    pub fn will_need(&self, range: &Range<usize>) {
        #[cfg(unix)]
        if !range.is_empty() {
            // Only a hint: a failure costs speed, never correctness.
            let _ = self.map.advise_range(memmap2::Advice::WillNeed, range.start, range.len());
        }
        #[cfg(not(unix))]
        let _ = range;
    }

    /// Drops the pages of `range` from this process's mapping (best effort), so that the
    /// file's bytes read so far stop counting in the resident set; the page cache keeps them
    /// and a later read maps them again.
    pub fn release(&self, range: Range<usize>) {
        #[cfg(unix)]
        if !range.is_empty() {
            // SAFETY: the mapping is a read-only shared mapping of a file: MADV_DONTNEED
            // removes the page-table entries and the next access reads the same bytes from
            // the page cache or the file again, so no reference into the mapping observes a
            // change. A failure only leaves the pages resident.
            let _ = unsafe {
                self.map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, range.start, range.len())
            };
        }
        #[cfg(not(unix))]
        let _ = range;
    }

    /// Checks the header of the mapped file and locates every tensor.
    fn parse_header(&self) -> Result<Vec<StoredTensor>, CheckpointError> {
        let path = &self.path;
        let len = self.map.len() as u64;
        if self.map.len() < LENGTH_BYTES {
            return Err(header(path, format!("the file has {len} bytes, fewer than the 8-byte header length")));
        }
        let mut length = [0u8; LENGTH_BYTES];
        length.copy_from_slice(&self.map[..LENGTH_BYTES]);
        let n = u64::from_le_bytes(length);
        let room = len - LENGTH_BYTES as u64;
        if n > room {
            return Err(header(
                path,
                format!(
                    "the header length {n} runs past the end of the file ({len} bytes): truncated or not safetensors"
                ),
            ));
        }
        if n > MAX_HEADER_BYTES {
            return Err(header(
                path,
                format!("the header length {n} exceeds safetensors' limit of {MAX_HEADER_BYTES} bytes"),
            ));
        }
        // It fits in the mapping's length, a usize.
        let data_start = LENGTH_BYTES + n as usize;
        let data_len = self.map.len() - data_start;
        let json: UniqueMap<Value> = serde_json::from_slice(&self.map[LENGTH_BYTES..data_start])
            .map_err(|e| header(path, format!("the header is not a JSON object of tensors: {e}")))?;

        let mut tensors = Vec::with_capacity(json.0.len());
        for (name, value) in json.0 {
            if name == METADATA_KEY {
                continue;
            }
            let entry: HeaderEntry =
                serde_json::from_value(value).map_err(|e| header(path, format!("tensor `{name}`: {e}")))?;
            let size = byte_size(entry.dtype, &entry.shape)
                .ok_or_else(|| header(path, format!("tensor `{name}`: shape {:?} is too large", entry.shape)))?;
            let (begin, end) = entry.data_offsets;
            if end < begin || end - begin != size {
                return Err(header(
                    path,
                    format!(
                        "tensor `{name}`: data offsets [{begin}, {end}] do not hold its {size} bytes ({:?}, shape {:?})",
                        entry.dtype, entry.shape
                    ),
                ));
            }
            tensors.push(StoredTensor { name, dtype: entry.dtype, shape: entry.shape, bytes: begin..end });
        }

        // In file order the tensors must tile the data section from its start.
        tensors.sort_by_key(|t| (t.bytes.start, t.bytes.end));
        let mut previous: Option<&StoredTensor> = None;
        for t in &tensors {
            let expected = previous.map_or(0, |p| p.bytes.end);
            if t.bytes.start != expected {
                let reason = match previous {
                    Some(p) if t.bytes.start < expected => format!(
                        "tensor `{}`'s data [{}, {}) overlaps tensor `{}`'s [{}, {})",
                        t.name, t.bytes.start, t.bytes.end, p.name, p.bytes.start, p.bytes.end
                    ),
                    _ => format!(
                        "{} unused bytes before tensor `{}`'s data (offset {}, expected {expected})",
                        t.bytes.start - expected,
                        t.name,
                        t.bytes.start
                    ),
                };
                return Err(header(path, reason));
            }
            previous = Some(t);
        }
        if let Some(t) = tensors.iter().find(|t| t.bytes.end > data_len) {
            let end = tensors.last().map_or(0, |t| t.bytes.end);
            return Err(CheckpointError::Truncated {
                file: path.clone(),
                tensor: t.name.clone(),
                // A hostile header may put the end anywhere below 2^64.
                needed: (data_start as u64).saturating_add(end as u64),
                len,
            });
        }
        let end = tensors.last().map_or(0, |t| t.bytes.end);
        if end < data_len {
            return Err(header(path, format!("{} bytes follow the last tensor's data", data_len - end)));
        }

        // The reference parser must agree with everything checked above.
        SafeTensors::read_metadata(&self.map).map_err(|e| header(path, format!("safetensors: {e}")))?;

        for t in &mut tensors {
            t.bytes = data_start + t.bytes.start..data_start + t.bytes.end;
        }
        Ok(tensors)
    }
}

/// The bytes `shape` elements of `dtype` take; `None` on overflow or a fraction of a byte.
fn byte_size(dtype: StoredDtype, shape: &[usize]) -> Option<usize> {
    let bits = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))?.checked_mul(dtype.bitsize())?;
    (bits % 8 == 0).then_some(bits / 8)
}

fn header(file: &Path, reason: String) -> CheckpointError {
    CheckpointError::Header { file: file.to_owned(), reason }
}
