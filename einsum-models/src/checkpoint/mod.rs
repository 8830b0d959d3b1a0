//! The weights of a checkpoint: the safetensors files of a Hugging Face model directory,
//! memory-mapped, each tensor read on demand into a [`HostTensor`] of the dtype asked for.
//!
//! A directory holds either one `model.safetensors` or a sharded checkpoint: an index
//! `model.safetensors.index.json` whose `weight_map` names each tensor's shard file.
//! [`Checkpoint::open`] maps every file and checks every header before any tensor is read
//! (the header length against the file, each tensor's dtype, shape and byte count, that the
//! tensors tile the data section, that the file holds all of it, and the index against its
//! shards), so a truncated download, a hostile header or an index that disagrees with its
//! shards is a [`CheckpointError`] naming the file and the tensor at open time, not a panic
//! or garbage later. [`Checkpoint::read`] then converts one tensor at a time into the dtype
//! asked for, straight from the mapping.

mod convert;
mod error;
mod file;
mod index;
mod unique_map;

use std::collections::BTreeMap;
use std::collections::btree_map::Entry as MapEntry;
use std::ops::Range;
use std::path::{Path, PathBuf};

use einsum_core::{DType, HostTensor, TensorDesc, TensorType};

pub use error::CheckpointError;
/// A tensor's dtype as stored in a safetensors file (the safetensors crate's `Dtype`): every
/// dtype a file may hold, of which F32, F16 and BF16 are read as weights.
pub use safetensors::Dtype as StoredDtype;

use convert::{Converted, convert};
use file::{ShardFile, StoredTensor};

/// The single-file checkpoint's name in a model directory.
pub const SINGLE_FILE: &str = "model.safetensors";
/// The sharded checkpoint's index's name in a model directory.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// What a checkpoint says of one tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The dtype it is stored in.
    pub dtype: StoredDtype,
    /// Its shape (row-major, C order).
    pub shape: Vec<usize>,
    /// The safetensors file holding it.
    pub file: PathBuf,
}

impl TensorInfo {
    /// The storage dtype it is stored in, when it is one weights are read from (F32, F16,
    /// BF16); `None` for any other stored dtype.
    pub fn storage_dtype(&self) -> Option<DType> {
        match self.dtype {
            StoredDtype::F32 => Some(DType::F32),
            StoredDtype::F16 => Some(DType::F16),
            StoredDtype::BF16 => Some(DType::BF16),
            _ => None,
        }
    }

    /// Its number of elements.
    pub fn volume(&self) -> usize {
        // The header check bounded the byte size, so the product fits.
        self.shape.iter().product()
    }
}

/// One tensor of the checkpoint: what it is and where its bytes are.
#[derive(Debug)]
struct Located {
    info: TensorInfo,
    /// Its file, an index into `Checkpoint::files`.
    file: usize,
    /// Its bytes within that file.
    bytes: Range<usize>,
}

/// The safetensors files of a model directory, memory-mapped and checked, and the tensors
/// they hold.
///
/// # Memory
/// Opening maps the files; it reads only their headers. [`read`](Self::read) allocates one
/// vector, the result (the tensor's volume times the requested dtype's size), and converts
/// into it straight from the mapping: no copy of the stored bytes and no intermediate f32
/// vector. The file's pages come from the kernel's page cache; those a read touches count in
/// the process's resident set only while that tensor converts, a chunk of 16 MiB at a time
/// (on Unix each converted chunk is dropped from the mapping with `MADV_DONTNEED`, the page
/// cache keeping it). So reading a tensor costs that tensor plus a few megabytes, never the
/// file, and loading a model tensor by tensor never holds more than the tensors kept.
///
/// # Files must not change while open
/// Like every memory-mapped loader, a `Checkpoint` assumes that its files are neither
/// truncated nor rewritten while it is open: the headers are checked once, at open time, and
/// a file shortened afterwards makes reading its pages fault (SIGBUS).
#[derive(Debug)]
pub struct Checkpoint {
    dir: PathBuf,
    files: Vec<ShardFile>,
    tensors: BTreeMap<String, Located>,
    /// What was searched, for [`CheckpointError::MissingTensor`].
    searched: String,
}

impl Checkpoint {
    /// Opens the checkpoint of the model directory `dir`: `model.safetensors` when it is
    /// there, else the shards named by `model.safetensors.index.json`. Every file is mapped
    /// and its header checked; for a sharded checkpoint, every shard must exist, no tensor
    /// may be in two shards, and every tensor of the weight map must be in the shard it
    /// names (tensors a shard holds that the map omits are kept too).
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let dir = dir.as_ref();
        let single = dir.join(SINGLE_FILE);
        let index = dir.join(INDEX_FILE);
        if single.is_file() {
            let (file, stored) = ShardFile::open(&single)?;
            let mut checkpoint = Checkpoint {
                dir: dir.to_owned(),
                files: Vec::new(),
                tensors: BTreeMap::new(),
                searched: single.display().to_string(),
            };
            checkpoint.add(file, stored)?;
            Ok(checkpoint)
        } else if index.is_file() {
            Self::open_sharded(dir, &index)
        } else {
            Err(CheckpointError::NoCheckpoint { dir: dir.to_owned() })
        }
    }

    fn open_sharded(dir: &Path, index_path: &Path) -> Result<Self, CheckpointError> {
        let weight_map = index::read_weight_map(index_path)?;
        // Each shard once, in name order (`model-00001-of-00004.safetensors` first), with the
        // first tensor the map puts in it (for the error if it is missing).
        let mut shards: BTreeMap<&str, &str> = BTreeMap::new();
        for (name, shard) in &weight_map {
            shards.entry(shard).or_insert(name);
        }
        let mut checkpoint = Checkpoint {
            dir: dir.to_owned(),
            files: Vec::new(),
            tensors: BTreeMap::new(),
            searched: format!(
                "{} and its shards {}",
                index_path.display(),
                shards.keys().copied().collect::<Vec<_>>().join(", ")
            ),
        };
        for (shard, first) in &shards {
            let path = dir.join(shard);
            if !path.is_file() {
                return Err(index::index(
                    index_path,
                    format!("`weight_map` puts tensor `{first}` in shard `{shard}`, which is not in the directory"),
                ));
            }
            let (file, stored) = ShardFile::open(&path)?;
            checkpoint.add(file, stored).map_err(|e| match e {
                CheckpointError::Index { reason, .. } => index::index(index_path, reason),
                other => other,
            })?;
        }
        for (name, shard) in &weight_map {
            let found = checkpoint.tensors.get(name).map(|t| &checkpoint.files[t.file]);
            if found.is_none_or(|f| f.path() != dir.join(shard)) {
                return Err(index::index(
                    index_path,
                    format!("`weight_map` puts tensor `{name}` in shard `{shard}`, whose header does not have it"),
                ));
            }
        }
        Ok(checkpoint)
    }

    /// Adds a file's tensors; a tensor another file already holds is an
    /// [`CheckpointError::Index`] (its path is replaced by the index's by the caller).
    fn add(&mut self, file: ShardFile, stored: Vec<StoredTensor>) -> Result<(), CheckpointError> {
        let at = self.files.len();
        for t in stored {
            match self.tensors.entry(t.name) {
                MapEntry::Occupied(e) => {
                    return Err(CheckpointError::Index {
                        path: file.path().to_owned(),
                        reason: format!(
                            "tensor `{}` is in two shards, {} and {}",
                            e.key(),
                            e.get().info.file.display(),
                            file.path().display()
                        ),
                    });
                }
                MapEntry::Vacant(e) => {
                    let info = TensorInfo { dtype: t.dtype, shape: t.shape, file: file.path().to_owned() };
                    e.insert(Located { info, file: at, bytes: t.bytes });
                }
            }
        }
        self.files.push(file);
        Ok(())
    }

    /// The model directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The safetensors files, in the order they were opened.
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.files.iter().map(ShardFile::path)
    }

    /// The tensors' names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// The number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// True when the checkpoint holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Whether the checkpoint holds a tensor of this name.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// The stored dtype, shape and file of the tensor `name`.
    pub fn info(&self, name: &str) -> Result<&TensorInfo, CheckpointError> {
        self.locate(name).map(|t| &t.info)
    }

    /// The tensor `name`, which must have the shape `shape`, converted once from its stored
    /// dtype (F32, F16 or BF16) to `dtype` (f16 and bf16 widen to f32 exactly; f32 narrows
    /// rounding to nearest, ties to even, as the `half` crate does). Its type is
    /// `TensorType::zero_bounded(shape)`. The cost is one allocation, the result (see the
    /// type's documentation).
    pub fn read(&self, name: &str, dtype: DType, shape: &[usize]) -> Result<HostTensor, CheckpointError> {
        let t = self.locate(name)?;
        if t.info.shape != shape {
            return Err(CheckpointError::Shape {
                tensor: name.to_owned(),
                expected: shape.to_vec(),
                found: t.info.shape.clone(),
            });
        }
        let stored = t
            .info
            .storage_dtype()
            .ok_or_else(|| CheckpointError::Dtype { tensor: name.to_owned(), dtype: t.info.dtype })?;
        let target = || CheckpointError::Target { tensor: name.to_owned(), dtype };
        if !dtype.is_float() {
            return Err(target());
        }
        let file = &self.files[t.file];
        file.will_need(&t.bytes);
        let base = t.bytes.start;
        let converted = convert(file.bytes(t.bytes.clone()), stored, dtype, |done| {
            file.release(base + done.start..base + done.end)
        })
        .ok_or_else(target)?;
        let ty = TensorType::zero_bounded(shape);
        match converted {
            Converted::F32(v) => HostTensor::from_f32(ty, DType::F32, v),
            Converted::F16(v) => HostTensor::from_f16(ty, v),
            Converted::BF16(v) => HostTensor::from_bf16(ty, v),
        }
        .map_err(|source| CheckpointError::Tensor { tensor: name.to_owned(), source })
    }

    /// The tensor `name` as a value of `desc` (its dtype and shape): the stored elements,
    /// row-major, where the stored shape is `desc`'s with some adjacent dimensions merged
    /// (transformers' `[heads·d_head, d_model]` projection as a graph input's `[heads,
    /// d_head, d_model]`), converted once to `desc`'s dtype. Any other stored shape is
    /// [`CheckpointError::Shape`].
    pub fn read_as(&self, name: &str, desc: &TensorDesc) -> Result<HostTensor, CheckpointError> {
        let stored = self.info(name)?.shape.clone();
        let shape = desc.shape();
        if !merges_into(&shape, &stored) {
            return Err(CheckpointError::Shape { tensor: name.to_owned(), expected: shape, found: stored });
        }
        self.read(name, desc.dtype, &stored)?
            .reshaped(desc.tensor_type())
            .map_err(|source| CheckpointError::Tensor { tensor: name.to_owned(), source })
    }

    /// The part `part` (a projection of `desc`'s type, at its absolute position) of tensor
    /// `name` read as [`Checkpoint::read_as`] reads the whole: only the bytes of the part's
    /// rows are read from the file, then converted once to `desc`'s dtype. What a rank of a
    /// multi-process job reads for its own devices' blocks of a weight. A part outside the
    /// tensor is [`CheckpointError::Tensor`].
    pub fn read_part(&self, name: &str, desc: &TensorDesc, part: &TensorType) -> Result<HostTensor, CheckpointError> {
        let whole = desc.tensor_type();
        let t = self.locate(name)?;
        let shape = desc.shape();
        if !merges_into(&shape, &t.info.shape) {
            return Err(CheckpointError::Shape {
                tensor: name.to_owned(),
                expected: shape,
                found: t.info.shape.clone(),
            });
        }
        let tensor_error = |source| CheckpointError::Tensor { tensor: name.to_owned(), source };
        part.check_projection_of(&whole).map_err(tensor_error)?;
        if part.rank() == 0 || *part == whole {
            return self.read_as(name, desc);
        }
        let stored = t
            .info
            .storage_dtype()
            .ok_or_else(|| CheckpointError::Dtype { tensor: name.to_owned(), dtype: t.info.dtype })?;
        let target = || CheckpointError::Target { tensor: name.to_owned(), dtype: desc.dtype };
        let size = stored.size_bytes();
        let file = &self.files[t.file];
        // The part's rows (runs along the last dimension), gathered in row-major order.
        let strides = whole.strides();
        let last = part.rank() - 1;
        let run = part.dim(last).hi - part.dim(last).lo;
        let mut bytes = Vec::with_capacity(part.volume() * size);
        let mut index = part.lower();
        while part.volume() > 0 {
            let at: usize = index.iter().zip(&strides).map(|(i, s)| i * s).sum();
            let start = t.bytes.start + at * size;
            bytes.extend_from_slice(file.bytes(start..start + run * size));
            // The next row: count the dimensions before the last, like an odometer.
            let Some(d) = (0..last).rev().find(|&d| index[d] + 1 < part.dim(d).hi) else { break };
            index[d] += 1;
            for (e, i) in index.iter_mut().enumerate().take(last).skip(d + 1) {
                *i = part.dim(e).lo;
            }
        }
        let converted = convert(&bytes, stored, desc.dtype, |_| {}).ok_or_else(target)?;
        match converted {
            Converted::F32(v) => HostTensor::from_f32(part.clone(), DType::F32, v),
            Converted::F16(v) => HostTensor::from_f16(part.clone(), v),
            Converted::BF16(v) => HostTensor::from_bf16(part.clone(), v),
        }
        .map_err(tensor_error)
    }

    fn locate(&self, name: &str) -> Result<&Located, CheckpointError> {
        self.tensors
            .get(name)
            .ok_or_else(|| CheckpointError::MissingTensor { name: name.to_owned(), searched: self.searched.clone() })
    }
}

/// Whether `stored` is `shape` with runs of adjacent dimensions merged (each stored extent
/// the product of the next run of `shape`'s, in order, every one used).
fn merges_into(shape: &[usize], stored: &[usize]) -> bool {
    let mut dims = shape.iter();
    for &want in stored {
        let mut product = 1usize;
        loop {
            match dims.next() {
                Some(&d) => product = product.saturating_mul(d),
                None => return false,
            }
            if product >= want {
                break;
            }
        }
        if product != want {
            return false;
        }
    }
    dims.all(|&d| d == 1)
}

#[cfg(test)]
mod tests {
    use super::merges_into;

    #[test]
    fn a_stored_shape_merges_adjacent_dimensions_in_order() {
        assert!(merges_into(&[4, 16, 64], &[64, 64]));
        assert!(merges_into(&[64, 4, 16], &[64, 64]));
        assert!(merges_into(&[4, 16], &[64]));
        assert!(merges_into(&[96, 64], &[96, 64]));
        assert!(merges_into(&[1, 64], &[64]));
        assert!(merges_into(&[], &[]));
        // A transpose or another factorisation of the same volume is not a merge.
        assert!(!merges_into(&[96, 64], &[64, 96]));
        assert!(!merges_into(&[4, 16, 64], &[16, 256]));
        assert!(!merges_into(&[4, 16], &[64, 1, 2]));
        assert!(!merges_into(&[4, 16, 2], &[64]));
    }
}
