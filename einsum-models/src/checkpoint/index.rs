//! The index of a sharded checkpoint, `model.safetensors.index.json`, as transformers writes
//! it: `{"metadata": {...}, "weight_map": {"tensor.name": "model-00001-of-00004.safetensors"}}`.
//!
//! Only the weight map is read (the metadata's `total_size` is informational). A tensor
//! named twice, a shard name that is not a relative path inside the directory, or an index
//! larger than any real one is an [`CheckpointError::Index`] naming the key.

use std::path::{Component, Path};

use serde::Deserialize;

use super::CheckpointError;
use super::unique_map::UniqueMap;

/// The largest index read: real ones are kilobytes (a 70B model's is about 60 KB), so a
/// larger file is not an index and is refused before it is read into memory.
const MAX_INDEX_BYTES: u64 = 100_000_000;

#[derive(Deserialize)]
struct IndexFile {
    weight_map: UniqueMap<String>,
}

/// The weight map of the index at `path`: each tensor's name and its shard's file name, in
/// file order; every shard name is a relative path with no `..` (it stays in the directory).
pub(super) fn read_weight_map(path: &Path) -> Result<Vec<(String, String)>, CheckpointError> {
    let io = |source| CheckpointError::Io { path: path.to_owned(), source };
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > MAX_INDEX_BYTES {
        return Err(index(path, format!("{len} bytes is larger than any index ({MAX_INDEX_BYTES} at most)")));
    }
    let text = std::fs::read(path).map_err(io)?;
    let de = &mut serde_json::Deserializer::from_slice(&text);
    let file: IndexFile = serde_path_to_error::deserialize(de).map_err(|e| {
        let at = e.path().to_string();
        let at = if at == "." { String::new() } else { format!("at `{at}`: ") };
        index(path, format!("{at}{}", e.into_inner()))
    })?;
    let map = file.weight_map.0;
    if map.is_empty() {
        return Err(index(path, "`weight_map` names no tensor".to_owned()));
    }
    if let Some((name, shard)) = map.iter().find(|(_, shard)| !stays_inside(shard)) {
        return Err(index(
            path,
            format!("`weight_map.{name}` names shard `{shard}`, which is not a file name inside the directory"),
        ));
    }
    Ok(map)
}

/// Whether `name` is a non-empty relative path of plain components (no `..`, no root).
fn stays_inside(name: &str) -> bool {
    let path = Path::new(name);
    path.components().next().is_some() && path.components().all(|c| matches!(c, Component::Normal(_)))
}

pub(super) fn index(path: &Path, reason: String) -> CheckpointError {
    CheckpointError::Index { path: path.to_owned(), reason }
}
