//! Writing tensors as `.npy` files with a `manifest.json`, so anyone can check our numbers
//! with NumPy or PyTorch.

use std::{fs, io::Write, path::Path};

use einsum_core::{DType, HostTensor};
use serde::Serialize;

use crate::{Error, Result};

/// One tensor to dump.
pub struct Dumped<'a> {
    /// Its name (the file is `NAME.npy`, with characters other than letters, digits, `.`,
    /// `_` and `-` replaced by `_`).
    pub name: &'a str,
    /// `input` or `output`.
    pub role: &'a str,
    /// Its value.
    pub value: &'a HostTensor,
}

/// The bytes of an `.npy` file (format version 1.0, little-endian, C order) holding
/// `tensor`: f32 as `<f4` and f16 as `<f2`; bf16, which NumPy lacks, is widened to `<f4`
/// (exactly, since every bf16 is an f32).
pub fn npy_bytes(tensor: &HostTensor) -> Vec<u8> {
    let (descr, data): (&str, Vec<u8>) = match tensor.dtype() {
        DType::F16 => {
            let bits = tensor.to_f32().iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect();
            ("<f2", bits)
        }
        DType::F32 | DType::BF16 => ("<f4", tensor.to_f32().iter().flat_map(|x| x.to_le_bytes()).collect()),
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

/// Writes every tensor as `DIR/NAME.npy` and a `DIR/manifest.json` listing name, file,
/// shape, dtype and role.
pub fn dump(dir: &Path, tensors: &[Dumped<'_>]) -> Result<()> {
    let io = |e: std::io::Error| Error::Io { path: dir.display().to_string(), message: e.to_string() };
    fs::create_dir_all(dir).map_err(io)?;
    let mut manifest = Manifest { tensors: Vec::new() };
    for t in tensors {
        let file: String =
            t.name.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
        let file = format!("{file}.npy");
        fs::File::create(dir.join(&file)).and_then(|mut f| f.write_all(&npy_bytes(t.value))).map_err(io)?;
        manifest.tensors.push(ManifestEntry {
            name: t.name,
            file,
            shape: t.value.ty().shape(),
            dtype: t.value.dtype().name(),
            role: t.role,
        });
    }
    let text = serde_json::to_string_pretty(&manifest)
        .map_err(|e| Error::Io { path: dir.display().to_string(), message: format!("manifest.json: {e}") })?;
    fs::write(dir.join("manifest.json"), text).map_err(io)
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
