//! Writing tensors as `.npy` files with a `manifest.json`, so anyone can check our numbers
//! with NumPy or PyTorch.

use std::{collections::BTreeSet, fs, path::Path};

use einsum_core::fsio::{MAX_INPUT_FILE_BYTES, read_capped, write_atomic};
use einsum_core::{DType, HostTensor};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// One tensor to dump.
pub struct Dumped<'a> {
    /// Its name (the file is `NAME.npy`, with characters other than letters, digits, `.`,
    /// `_` and `-` replaced by `_`, and `-2`, `-3`, ... after a name another tensor took).
    pub name: &'a str,
    /// `input` or `output`.
    pub role: &'a str,
    /// Its value.
    pub value: &'a HostTensor,
}

/// The bytes of an `.npy` file (format version 1.0, little-endian, C order) holding
/// `tensor`: f32 as `<f4`, f16 as `<f2` and i32 as `<i4`; bf16, which NumPy lacks, is widened
/// to `<f4` (exactly, since every bf16 is an f32).
///
/// Written here rather than with `npyz` (issue 36): its header spells a shape `(64, )` and
/// `(2, 3, )` where NumPy and this function write `(64,)` and `(2, 3)`, so the files would
/// change, and it brings a Python-literal parser (`py_literal`, `pest`, `num-bigint`).
pub fn npy_bytes(tensor: &HostTensor) -> Vec<u8> {
    let (descr, data): (&str, Vec<u8>) = match tensor.dtype() {
        DType::F16 => {
            let bits = tensor.to_f32().iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect();
            ("<f2", bits)
        }
        DType::F32 | DType::BF16 => ("<f4", tensor.to_f32().iter().flat_map(|x| x.to_le_bytes()).collect()),
        DType::I32 => ("<i4", tensor.to_i32().iter().flat_map(|x| x.to_le_bytes()).collect()),
    };
    let shape = tensor.ty().shape();
    let shape = match shape.as_slice() {
        [one] => format!("({one},)"),
        dims => format!("({})", dims.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Magic (6) + version (2) + header length (2) + header, padded with spaces to a multiple
    // of 64 and ended by a newline.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

/// The manifest's file name in a dump directory.
pub const MANIFEST: &str = "manifest.json";

/// Writes every tensor as `DIR/NAME.npy` and a `DIR/manifest.json` listing name, file,
/// shape, dtype and role.
///
/// Every file is written atomically ([`write_atomic`]), the manifest last, so a dump that
/// fails part-way leaves no truncated file and no manifest listing a file it lacks.
///
/// A directory that already holds a dump (a `manifest.json` this function wrote) is
/// cleared of that dump's files first: only the files its manifest lists, then the
/// manifest, so no stale tensor stays beside the new manifest. Other files in the
/// directory are never touched. A `manifest.json` that is not a dump's manifest (or lists a
/// file outside the directory) is refused, and nothing is written.
pub fn dump(dir: &Path, tensors: &[Dumped<'_>]) -> Result<()> {
    let io = |e: std::io::Error| Error::Io { path: dir.display().to_string(), message: e.to_string() };
    fs::create_dir_all(dir).map_err(io)?;
    clear_previous(dir)?;
    let mut manifest = Manifest { tensors: Vec::new() };
    let mut used = BTreeSet::new();
    for t in tensors {
        let file = file_name(t.name, &mut used);
        write_atomic(dir.join(&file), &npy_bytes(t.value))?;
        manifest.tensors.push(ManifestEntry {
            name: t.name,
            file,
            shape: t.value.ty().shape(),
            dtype: t.value.dtype().name(),
            role: t.role,
        });
    }
    let text = serde_json::to_string_pretty(&manifest)
        .map_err(|e| Error::Io { path: dir.join(MANIFEST).display().to_string(), message: e.to_string() })?;
    Ok(write_atomic(dir.join(MANIFEST), text.as_bytes())?)
}

/// The file of the tensor `name`: `NAME.npy` with characters other than letters, digits,
/// `.`, `_` and `-` replaced by `_` (and `_` before a leading `.`), and `-2`, `-3`, ...
/// appended to a name already `used` (`a b` and `a_b` must not overwrite each other).
fn file_name(name: &str, used: &mut BTreeSet<String>) -> String {
    let mut stem: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    // Never hidden (nor `..`), never empty.
    if stem.is_empty() || stem.starts_with('.') {
        stem.insert(0, '_');
    }
    let mut file = format!("{stem}.npy");
    let mut k = 2;
    while !used.insert(file.clone()) {
        file = format!("{stem}-{k}.npy");
        k += 1;
    }
    file
}

/// Removes the files of an earlier dump in `dir` (those its `manifest.json` lists), then
/// that manifest; a directory without one is left as it is. The files go first, so that a
/// failure in between leaves a manifest listing missing files (which the next dump skips)
/// rather than files no manifest lists.
fn clear_previous(dir: &Path) -> Result<()> {
    let path = dir.join(MANIFEST);
    if !path.exists() {
        return Ok(());
    }
    let refuse = |why: String| Error::Io {
        path: path.display().to_string(),
        message: format!("--dump: {why}; choose a directory without it, or remove it"),
    };
    let text = read_capped(&path, MAX_INPUT_FILE_BYTES)?;
    let previous: PreviousManifest =
        serde_json::from_str(&text).map_err(|e| refuse(format!("not the manifest of an earlier dump ({e})")))?;
    for entry in &previous.tensors {
        if !is_own_file(&entry.file) {
            return Err(refuse(format!("lists `{}`, which is not a file this command writes", entry.file)));
        }
    }
    for entry in &previous.tensors {
        let file = dir.join(&entry.file);
        match fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::Io { path: file.display().to_string(), message: format!("--dump: {e}") });
            }
            _ => {}
        }
    }
    fs::remove_file(&path).map_err(|e| Error::Io { path: path.display().to_string(), message: format!("--dump: {e}") })
}

/// Whether `file` is a name [`file_name`] can produce: `.npy` in the directory itself, of
/// letters, digits, `.`, `_` and `-` only (so never `..`, a separator or an absolute path).
fn is_own_file(file: &str) -> bool {
    file.len() > ".npy".len()
        && file.ends_with(".npy")
        && !file.starts_with('.')
        && file.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

/// The part of an earlier `manifest.json` that clearing needs.
#[derive(Deserialize)]
struct PreviousManifest {
    tensors: Vec<PreviousEntry>,
}

/// One tensor of a [`PreviousManifest`]: its file.
#[derive(Deserialize)]
struct PreviousEntry {
    file: String,
}

/// `DIR/manifest.json`: what [`dump`] wrote, so a reader finds each tensor's file, shape
/// and dtype without parsing the `.npy` headers.
#[derive(Serialize)]
pub struct Manifest<'a> {
    /// Every tensor dumped, inputs first.
    pub tensors: Vec<ManifestEntry<'a>>,
}

/// One tensor of a [`Manifest`].
#[derive(Serialize)]
pub struct ManifestEntry<'a> {
    /// The tensor's name.
    pub name: &'a str,
    /// Its file in the dump directory, `NAME.npy` with unsafe characters replaced by `_`.
    pub file: String,
    /// Its shape, outermost dimension first.
    pub shape: Vec<usize>,
    /// Its dtype's name as stored in the computation (`bf16` is written as `<f4`).
    pub dtype: &'static str,
    /// `input` or `output`.
    pub role: &'a str,
}

#[cfg(test)]
mod tests {
    use einsum_core::TensorType;

    use super::*;

    fn listing(dir: &Path) -> Vec<String> {
        let mut files: Vec<String> =
            fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        files.sort();
        files
    }

    #[test]
    fn a_new_dump_clears_only_the_files_of_the_previous_one() {
        let dir = std::env::temp_dir().join(format!("einsummable-dump-unit-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("notes.txt"), "mine").unwrap();
        let t = HostTensor::from_f32(TensorType::zero_bounded(&[2]), DType::F32, vec![1.0, 2.0]).unwrap();
        let tensor = |name| Dumped { name, role: "output", value: &t };
        // `a b` and `a_b` share a sanitised name: both are kept.
        dump(&dir, &[tensor("a b"), tensor("a_b"), tensor(".hidden")]).unwrap();
        assert_eq!(listing(&dir), ["_.hidden.npy", "a_b-2.npy", "a_b.npy", "manifest.json", "notes.txt"]);
        dump(&dir, &[tensor("z")]).unwrap();
        assert_eq!(listing(&dir), ["manifest.json", "notes.txt", "z.npy"]);

        // A manifest this command did not write, or one pointing outside, is refused untouched.
        for foreign in
            [r#"{"rows": []}"#, r#"{"tensors": [{"file": "../z.npy"}]}"#, r#"{"tensors": [{"file": "notes.txt"}]}"#]
        {
            fs::write(dir.join(MANIFEST), foreign).unwrap();
            let e = dump(&dir, &[tensor("y")]).unwrap_err().to_string();
            assert!(e.contains("manifest.json") && e.contains("--dump"), "{e}");
            assert_eq!(listing(&dir), ["manifest.json", "notes.txt", "z.npy"]);
            assert_eq!(fs::read_to_string(dir.join(MANIFEST)).unwrap(), foreign);
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn npy_header_is_aligned_and_data_follows() {
        let t = HostTensor::from_f32(TensorType::zero_bounded(&[2, 3]), DType::F32, (0..6).map(|x| x as f32).collect())
            .unwrap();
        let bytes = npy_bytes(&t);
        assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
        let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert_eq!((10 + header_len) % 64, 0);
        let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
        assert!(header.contains("'descr': '<f4'") && header.contains("'shape': (2, 3)"), "{header}");
        assert!(header.ends_with('\n'));
        assert_eq!(bytes.len(), 10 + header_len + 24);
        assert_eq!(&bytes[10 + header_len + 4..10 + header_len + 8], &1.0f32.to_le_bytes());
        let v = HostTensor::from_f32(TensorType::zero_bounded(&[3]), DType::F16, vec![1.0, 2.0, 3.0]).unwrap();
        let bytes = npy_bytes(&v);
        let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert!(std::str::from_utf8(&bytes[10..10 + header_len]).unwrap().contains("(3,)"));
        assert_eq!(bytes.len(), 10 + header_len + 6);
    }
}
