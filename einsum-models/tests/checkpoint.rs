//! Checkpoints: safetensors files written here (by the safetensors crate's serializer, or by
//! hand for malformed ones) read back exactly or rounded as `half` rounds, in one file or
//! sharded behind an index; every malformed file or index is a typed error naming the file
//! and the tensor; transformers' own files (the committed fixtures) read as their bytes say.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use einsum_core::{DType, Elements, HostTensor, TensorType};
use einsum_models::checkpoint::{Checkpoint, CheckpointError, INDEX_FILE, SINGLE_FILE, StoredDtype};
use half::{bf16, f16};
use proptest::prelude::*;
use safetensors::SafeTensors;
use safetensors::tensor::TensorView;

// ---- helpers -----------------------------------------------------------------------------

mod common;
use common::TempDir;

/// The three stored dtypes weights come in.
const FLOATS: [StoredDtype; 3] = [StoredDtype::F32, StoredDtype::F16, StoredDtype::BF16];
const TARGETS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// A tensor to write: its stored dtype, shape and little-endian bytes.
struct Stored {
    dtype: StoredDtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

/// `values` stored as `dtype` (rounded by `half` for f16 and bf16).
fn stored(dtype: StoredDtype, shape: &[usize], values: &[f32]) -> Stored {
    assert_eq!(values.len(), shape.iter().product::<usize>());
    let bytes = match dtype {
        StoredDtype::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        StoredDtype::F16 => values.iter().flat_map(|&v| f16::from_f32(v).to_bits().to_le_bytes()).collect(),
        StoredDtype::BF16 => values.iter().flat_map(|&v| bf16::from_f32(v).to_bits().to_le_bytes()).collect(),
        other => panic!("no test values for {other:?}"),
    };
    Stored { dtype, shape: shape.to_vec(), bytes }
}

/// The stored elements of `s` as f32 (exact for every float dtype).
fn stored_f32(s: &Stored) -> Vec<f32> {
    match s.dtype {
        StoredDtype::F32 => s.bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(),
        StoredDtype::F16 => {
            s.bytes.chunks_exact(2).map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32()).collect()
        }
        StoredDtype::BF16 => {
            s.bytes.chunks_exact(2).map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32()).collect()
        }
        other => panic!("no f32 values for {other:?}"),
    }
}

/// The safetensors file of `tensors`, by the safetensors crate's serializer.
fn serialize(tensors: &[(&str, &Stored)]) -> Vec<u8> {
    let views: Vec<(&str, TensorView<'_>)> =
        tensors.iter().map(|(name, s)| (*name, TensorView::new(s.dtype, s.shape.clone(), &s.bytes).unwrap())).collect();
    safetensors::serialize(views, None).unwrap()
}

/// A safetensors file made by hand: `header` (JSON) and `data` after the length field.
fn hand_made(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// Deterministic values that exercise rounding: random mantissas over a range of exponents,
/// exact ties for bf16 and f16, subnormals, values past f16's range, signed zeros.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let special = [
        0.0,
        -0.0,
        1.0 + 2f32.powi(-8),       // bf16 tie, rounds down to even
        1.0 + 3.0 * 2f32.powi(-8), // bf16 tie, rounds up to even
        1.0 + 2f32.powi(-11),      // f16 tie
        1.0e-7,                    // f16 subnormal
        70000.0,                   // past f16's range: inf
        -3.0e38,
        f32::MIN_POSITIVE,
    ];
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|i| {
            if i < special.len() {
                return special[i];
            }
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mantissa = (state & 0x7F_FFFF) as u32;
            let exponent = 127 - 20 + (state >> 23) as u32 % 40;
            let sign = ((state >> 40) & 1) as u32;
            f32::from_bits(sign << 31 | exponent << 23 | mantissa)
        })
        .collect()
}

/// The bits of `t`'s elements in its storage dtype.
fn bits(t: &HostTensor) -> Vec<u32> {
    match t.elements().expect("a read tensor is compact") {
        Elements::F32(v) => v.iter().map(|x| x.to_bits()).collect(),
        Elements::F16(v) => v.iter().map(|x| u32::from(x.to_bits())).collect(),
        Elements::BF16(v) => v.iter().map(|x| u32::from(x.to_bits())).collect(),
        Elements::I32(v) => v.iter().map(|&x| x as u32).collect(),
    }
}

/// The bits `half` gives for `values` (exact f32s) stored as `dtype`.
fn expected_bits(values: &[f32], dtype: DType) -> Vec<u32> {
    values
        .iter()
        .map(|&v| match dtype {
            DType::F32 => v.to_bits(),
            DType::F16 => u32::from(f16::from_f32(v).to_bits()),
            DType::BF16 => u32::from(bf16::from_f32(v).to_bits()),
            DType::I32 => unreachable!("weights are floats"),
        })
        .collect()
}

/// Reads every tensor of `tensors` from `checkpoint` as every dtype and checks its bits.
fn check_round_trip(checkpoint: &Checkpoint, tensors: &[(String, Stored)]) {
    assert_eq!(checkpoint.len(), tensors.len());
    for (name, s) in tensors {
        let info = checkpoint.info(name).unwrap();
        assert_eq!((info.dtype, &info.shape), (s.dtype, &s.shape), "{name}");
        let exact = stored_f32(s);
        for dtype in TARGETS {
            let t = checkpoint.read(name, dtype, &s.shape).unwrap_or_else(|e| panic!("{name} as {dtype}: {e}"));
            assert_eq!(t.dtype(), dtype);
            assert_eq!(*t.ty(), TensorType::zero_bounded(&s.shape));
            assert_eq!(bits(&t), expected_bits(&exact, dtype), "{name} ({:?}) read as {dtype}", s.dtype);
        }
    }
}

/// One tensor of each stored float dtype, of a few shapes (a scalar among them).
fn mixed_tensors(prefix: &str, seed: u64) -> Vec<(String, Stored)> {
    let shapes: [&[usize]; 3] = [&[3, 17], &[40], &[]];
    FLOATS
        .iter()
        .zip(shapes)
        .enumerate()
        .map(|(i, (&dtype, shape))| {
            let n = shape.iter().product();
            (format!("{prefix}.{i}.weight"), stored(dtype, shape, &values(n, seed + i as u64)))
        })
        .collect()
}

fn write_single(dir: &Path, tensors: &[(String, Stored)]) -> PathBuf {
    let refs: Vec<(&str, &Stored)> = tensors.iter().map(|(n, s)| (n.as_str(), s)).collect();
    let path = dir.join(SINGLE_FILE);
    fs::write(&path, serialize(&refs)).unwrap();
    path
}

/// Writes `shards` (file name, tensors) and an index mapping each tensor to its shard.
fn write_sharded(dir: &Path, shards: &[(&str, &[(String, Stored)])]) {
    let mut map = BTreeMap::new();
    for (file, tensors) in shards {
        let refs: Vec<(&str, &Stored)> = tensors.iter().map(|(n, s)| (n.as_str(), s)).collect();
        fs::write(dir.join(file), serialize(&refs)).unwrap();
        for (name, _) in *tensors {
            map.insert(name.clone(), file.to_string());
        }
    }
    let index = serde_json::json!({ "metadata": { "total_size": 0 }, "weight_map": map });
    fs::write(dir.join(INDEX_FILE), index.to_string()).unwrap();
}

fn open_err(dir: &Path) -> CheckpointError {
    Checkpoint::open(dir).expect_err("a malformed checkpoint must not open")
}

// ---- round trips -------------------------------------------------------------------------

#[test]
fn single_file_round_trips_every_stored_dtype_as_every_dtype() {
    let dir = TempDir::new("single");
    let tensors = mixed_tensors("model.layers.0", 1);
    let path = write_single(dir.path(), &tensors);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(checkpoint.files().collect::<Vec<_>>(), [path.as_path()]);
    assert_eq!(checkpoint.dir(), dir.path());
    check_round_trip(&checkpoint, &tensors);
    let names: Vec<&str> = checkpoint.names().collect();
    assert_eq!(names, ["model.layers.0.0.weight", "model.layers.0.1.weight", "model.layers.0.2.weight"]);
    assert!(checkpoint.contains("model.layers.0.1.weight") && !checkpoint.contains("nope"));
}

#[test]
fn sharded_round_trips_every_stored_dtype_as_every_dtype() {
    let dir = TempDir::new("sharded");
    let first = mixed_tensors("model.layers.0", 2);
    let second = mixed_tensors("model.layers.1", 3);
    write_sharded(
        dir.path(),
        &[("model-00001-of-00002.safetensors", &first), ("model-00002-of-00002.safetensors", &second)],
    );
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(checkpoint.files().count(), 2);
    let all: Vec<(String, Stored)> = first.into_iter().chain(second).collect();
    check_round_trip(&checkpoint, &all);
    let info = checkpoint.info("model.layers.1.2.weight").unwrap();
    assert_eq!(info.file, dir.path().join("model-00002-of-00002.safetensors"));
    assert_eq!(info.storage_dtype(), Some(DType::BF16));
}

#[test]
fn rounding_is_to_nearest_even_as_half_does() {
    // Spot values with known answers, independent of `half`: ties go to the even neighbour.
    let dir = TempDir::new("rounding");
    let v = [1.0 + 2f32.powi(-8), 1.0 + 3.0 * 2f32.powi(-8), 70000.0];
    write_single(dir.path(), &[("w".to_owned(), stored(StoredDtype::F32, &[3], &v))]);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let b = checkpoint.read("w", DType::BF16, &[3]).unwrap().to_f32();
    assert_eq!(b[..2], [1.0, 1.0 + 2.0 * 2f32.powi(-7)]);
    let h = checkpoint.read("w", DType::F16, &[3]).unwrap().to_f32();
    assert_eq!(h[2], f32::INFINITY);
}

#[test]
fn empty_tensor_and_empty_file_read() {
    let dir = TempDir::new("empty-tensor");
    write_single(dir.path(), &[("e".to_owned(), stored(StoredDtype::BF16, &[0, 4], &[]))]);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let t = checkpoint.read("e", DType::F32, &[0, 4]).unwrap();
    assert!(t.is_empty());

    let dir = TempDir::new("no-tensor");
    write_single(dir.path(), &[]);
    assert!(Checkpoint::open(dir.path()).unwrap().is_empty());
}

#[test]
fn a_single_file_wins_over_an_index() {
    // transformers looks for model.safetensors first.
    let dir = TempDir::new("both");
    write_single(dir.path(), &mixed_tensors("a", 4));
    fs::write(dir.path().join(INDEX_FILE), "not read").unwrap();
    assert_eq!(Checkpoint::open(dir.path()).unwrap().len(), 3);
}

/// The committed fixtures, written by transformers: every tensor reads as the bytes the
/// safetensors crate itself finds, in the single-file and the sharded layout.
#[test]
fn transformers_fixtures_read_as_their_bytes() {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for (family, files) in [("llama3", 1), ("llama2", 4)] {
        let dir = fixtures.join(family);
        let checkpoint = Checkpoint::open(&dir).unwrap_or_else(|e| panic!("{family}: {e}"));
        assert_eq!(checkpoint.files().count(), files, "{family}");
        let mut seen = 0;
        for path in checkpoint.files().map(Path::to_owned).collect::<Vec<_>>() {
            let bytes = fs::read(&path).unwrap();
            let reference = SafeTensors::deserialize(&bytes).unwrap();
            for (name, view) in reference.iter() {
                seen += 1;
                let s = Stored { dtype: view.dtype(), shape: view.shape().to_vec(), bytes: view.data().to_vec() };
                let exact = stored_f32(&s);
                let f32s = checkpoint.read(name, DType::F32, view.shape()).unwrap();
                assert_eq!(bits(&f32s), expected_bits(&exact, DType::F32), "{family}: {name}");
                let bf16s = checkpoint.read(name, DType::BF16, view.shape()).unwrap();
                assert_eq!(bits(&bf16s), expected_bits(&exact, DType::BF16), "{family}: {name}");
            }
        }
        assert_eq!(seen, checkpoint.len(), "{family}");
    }
}

// ---- reading errors ----------------------------------------------------------------------

#[test]
fn missing_tensor_names_it_and_where_it_was_looked_for() {
    let dir = TempDir::new("missing");
    write_single(dir.path(), &mixed_tensors("m", 5));
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let e = checkpoint.read("lm_head.weight", DType::F32, &[2]).unwrap_err();
    assert!(matches!(&e, CheckpointError::MissingTensor { name, .. } if name == "lm_head.weight"));
    let text = e.to_string();
    assert!(text.contains("lm_head.weight") && text.contains(SINGLE_FILE), "{text}");
    assert!(matches!(checkpoint.info("lm_head.weight"), Err(CheckpointError::MissingTensor { .. })));

    let dir = TempDir::new("missing-sharded");
    let tensors = mixed_tensors("m", 6);
    write_sharded(dir.path(), &[("shard-a.safetensors", &tensors)]);
    let text = Checkpoint::open(dir.path()).unwrap().read("x", DType::F32, &[1]).unwrap_err().to_string();
    assert!(text.contains(INDEX_FILE) && text.contains("shard-a.safetensors"), "{text}");
}

#[test]
fn wrong_shape_names_tensor_expected_and_found() {
    let dir = TempDir::new("shape");
    write_single(dir.path(), &mixed_tensors("s", 7));
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let e = checkpoint.read("s.0.weight", DType::BF16, &[17, 3]).unwrap_err();
    match &e {
        CheckpointError::Shape { tensor, expected, found } => {
            assert_eq!(
                (tensor.as_str(), expected.as_slice(), found.as_slice()),
                ("s.0.weight", &[17, 3][..], &[3, 17][..])
            );
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("[3, 17]") && e.to_string().contains("[17, 3]"), "{e}");
}

#[test]
fn unsupported_stored_dtype_names_tensor_and_dtype() {
    let dir = TempDir::new("i64");
    let ids = Stored {
        dtype: StoredDtype::I64,
        shape: vec![2],
        bytes: [7i64, -1].iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    let path = dir.path().join(SINGLE_FILE);
    fs::write(&path, serialize(&[("position_ids", &ids)])).unwrap();
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(checkpoint.info("position_ids").unwrap().storage_dtype(), None);
    let e = checkpoint.read("position_ids", DType::F32, &[2]).unwrap_err();
    assert!(matches!(&e, CheckpointError::Dtype { tensor, dtype: StoredDtype::I64 } if tensor == "position_ids"));
    assert!(e.to_string().contains("I64"), "{e}");
}

#[test]
fn integer_target_is_refused() {
    let dir = TempDir::new("target");
    write_single(dir.path(), &mixed_tensors("t", 8));
    let e = Checkpoint::open(dir.path()).unwrap().read("t.0.weight", DType::I32, &[3, 17]).unwrap_err();
    assert!(matches!(e, CheckpointError::Target { dtype: DType::I32, .. }), "{e}");
}

#[test]
fn host_tensor_half_constructors_check_the_length() {
    let ty = TensorType::zero_bounded(&[2, 3]);
    assert!(HostTensor::from_bf16(ty.clone(), vec![bf16::ONE; 5]).is_err());
    assert!(HostTensor::from_f16(ty.clone(), vec![f16::ONE; 7]).is_err());
    assert_eq!(HostTensor::from_bf16(ty, vec![bf16::ONE; 6]).unwrap().dtype(), DType::BF16);
}

// ---- malformed files ---------------------------------------------------------------------

/// Writes `bytes` as the directory's model.safetensors; the error opening it.
fn open_bytes(name: &str, bytes: &[u8]) -> (TempDir, CheckpointError) {
    let dir = TempDir::new(name);
    fs::write(dir.path().join(SINGLE_FILE), bytes).unwrap();
    let e = open_err(dir.path());
    (dir, e)
}

fn assert_header(e: &CheckpointError, words: &[&str]) {
    let CheckpointError::Header { file, reason } = e else { panic!("expected a header error, got {e}") };
    assert!(file.ends_with(SINGLE_FILE), "{e}");
    for w in words {
        assert!(reason.contains(w), "`{w}` not in: {e}");
    }
}

#[test]
fn truncated_file_names_the_first_tensor_past_the_end() {
    // Large enough that half the file still holds the header.
    let tensors: Vec<(String, Stored)> =
        (0..4).map(|i| (format!("layer{i}"), stored(StoredDtype::F32, &[64, 16], &values(1024, i)))).collect();
    let refs: Vec<(&str, &Stored)> = tensors.iter().map(|(n, s)| (n.as_str(), s)).collect();
    let good = serialize(&refs);
    let (n, meta) = SafeTensors::read_metadata(&good).unwrap();
    let mut by_offset: Vec<(usize, String)> =
        meta.tensors().into_iter().map(|(name, info)| (info.data_offsets.1, name)).collect();
    by_offset.sort();
    for cut in [good.len() - 3, good.len() / 2] {
        let expected = &by_offset.iter().find(|(end, _)| 8 + n + end > cut).unwrap().1;
        let (_dir, e) = open_bytes("truncated", &good[..cut]);
        match &e {
            CheckpointError::Truncated { file, tensor, needed, len } => {
                assert!(file.ends_with(SINGLE_FILE));
                assert_eq!((tensor, *needed, *len), (expected, good.len() as u64, cut as u64));
            }
            other => panic!("cut at {cut}: {other}"),
        }
        assert!(e.to_string().contains(expected.as_str()), "{e}");
    }
    // Cut inside the header: its length runs past the end.
    let (_dir, e) = open_bytes("truncated-header", &good[..20]);
    assert_header(&e, &["header length"]);
}

#[test]
fn header_length_past_the_end_or_huge_is_refused_without_allocating() {
    let mut bytes = 1000u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    let (_dir, e) = open_bytes("past-end-1000", &bytes);
    assert_header(&e, &["header length 1000", "runs past the end"]);
    let mut bytes = (1u64 << 60).to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    let (_dir, e) = open_bytes("huge", &bytes);
    assert_header(&e, &[&(1u64 << 60).to_string()]);
    let (_dir, e) = open_bytes("tiny", b"abc");
    assert_header(&e, &["3 bytes"]);
    let (_dir, e) = open_bytes("zero", b"");
    assert_header(&e, &["0 bytes"]);
}

#[test]
fn header_that_is_not_json_or_not_tensors_is_refused() {
    let (_dir, e) = open_bytes("not-json", &hand_made("this is not json", &[]));
    assert_header(&e, &["JSON"]);
    let (_dir, e) = open_bytes("not-object", &hand_made("[1, 2]", &[]));
    assert_header(&e, &["JSON"]);
    let mut not_utf8 = 3u64.to_le_bytes().to_vec();
    not_utf8.extend_from_slice(b"{\xff}");
    let (_dir, e) = open_bytes("not-utf8", &not_utf8);
    assert_header(&e, &["JSON"]);
    let (_dir, e) =
        open_bytes("unknown-dtype", &hand_made(r#"{"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,1]}}"#, &[0]));
    assert_header(&e, &["`w`", "Q4"]);
    let (_dir, e) = open_bytes("no-shape", &hand_made(r#"{"w":{"dtype":"F32","data_offsets":[0,4]}}"#, &[0; 4]));
    assert_header(&e, &["`w`", "shape"]);
    let (_dir, e) = open_bytes(
        "twice",
        &hand_made(
            r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
            &[0; 8],
        ),
    );
    assert_header(&e, &["`w` appears twice"]);
}

#[test]
fn offsets_that_overlap_leave_gaps_mismatch_or_lie_outside_are_refused() {
    let f32x2 =
        |name: &str, b: usize, e: usize| format!(r#""{name}":{{"dtype":"F32","shape":[2],"data_offsets":[{b},{e}]}}"#);
    let header = |entries: &[String]| format!("{{{}}}", entries.join(","));

    let (_dir, e) = open_bytes("overlap", &hand_made(&header(&[f32x2("a", 0, 8), f32x2("b", 4, 12)]), &[0; 12]));
    assert_header(&e, &["`a`", "`b`", "overlaps"]);

    let (_dir, e) = open_bytes("gap", &hand_made(&header(&[f32x2("a", 0, 8), f32x2("b", 12, 20)]), &[0; 20]));
    assert_header(&e, &["`b`", "unused"]);

    let (_dir, e) = open_bytes("size", &hand_made(&header(&[f32x2("a", 0, 12)]), &[0; 12]));
    assert_header(&e, &["`a`", "[0, 12]", "8 bytes"]);

    let (_dir, e) = open_bytes("reversed", &hand_made(&header(&[f32x2("a", 8, 0)]), &[0; 8]));
    assert_header(&e, &["`a`"]);

    let (_dir, e) = open_bytes("outside", &hand_made(&header(&[f32x2("a", 0, 8), f32x2("b", 8, 16)]), &[0; 10]));
    assert!(matches!(&e, CheckpointError::Truncated { tensor, .. } if tensor == "b"), "{e}");

    let (_dir, e) = open_bytes("trailing", &hand_made(&header(&[f32x2("a", 0, 8)]), &[0; 11]));
    assert_header(&e, &["3 bytes follow"]);

    // Eight tensors of 2^61 - 1 bytes, each consistent with its shape and tiling the data
    // section up to just below 2^64: the file is far too short (the first names it), and the
    // size it would need saturates instead of overflowing.
    let size = (1u64 << 61) - 1;
    let entries: Vec<String> = (0..8u64)
        .map(|i| {
            format!(r#""t{i}":{{"dtype":"U8","shape":[{size}],"data_offsets":[{},{}]}}"#, i * size, (i + 1) * size)
        })
        .collect();
    let (_dir, e) = open_bytes("end-near-2^64", &hand_made(&header(&entries), &[0; 8]));
    assert!(matches!(&e, CheckpointError::Truncated { tensor, needed: u64::MAX, .. } if tensor == "t0"), "{e}");

    let huge = r#"{"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,8]}}"#;
    let (_dir, e) = open_bytes("overflow", &hand_made(huge, &[0; 8]));
    assert_header(&e, &["`a`", "too large"]);
}

// ---- directories and indexes -------------------------------------------------------------

#[test]
fn empty_or_absent_directory_is_no_checkpoint() {
    let dir = TempDir::new("empty");
    let e = open_err(dir.path());
    assert!(matches!(&e, CheckpointError::NoCheckpoint { dir: d } if d == dir.path()), "{e}");
    assert!(e.to_string().contains(SINGLE_FILE), "{e}");
    assert!(matches!(open_err(&dir.path().join("absent")), CheckpointError::NoCheckpoint { .. }));
}

#[test]
fn index_naming_a_missing_shard_names_it() {
    let dir = TempDir::new("missing-shard");
    let tensors = mixed_tensors("a", 9);
    write_sharded(dir.path(), &[("model-00001-of-00002.safetensors", &tensors)]);
    let index = serde_json::json!({ "weight_map": {
        "a.0.weight": "model-00001-of-00002.safetensors",
        "a.1.weight": "model-00001-of-00002.safetensors",
        "a.2.weight": "model-00001-of-00002.safetensors",
        "lm_head.weight": "model-00002-of-00002.safetensors",
    }});
    fs::write(dir.path().join(INDEX_FILE), index.to_string()).unwrap();
    let e = open_err(dir.path());
    let CheckpointError::Index { path, reason } = &e else { panic!("{e}") };
    assert!(path.ends_with(INDEX_FILE));
    assert!(reason.contains("model-00002-of-00002.safetensors") && reason.contains("lm_head.weight"), "{e}");
}

#[test]
fn tensor_in_two_shards_or_absent_from_its_shard_is_refused() {
    let dir = TempDir::new("two-shards");
    let a = mixed_tensors("x", 10);
    let b = mixed_tensors("x", 11);
    write_sharded(dir.path(), &[("a.safetensors", &a), ("b.safetensors", &b)]);
    // Both shards hold x.0, x.1 and x.2; the index names each shard for one of them.
    let index = serde_json::json!({ "weight_map": { "x.0.weight": "a.safetensors", "x.1.weight": "b.safetensors" }});
    fs::write(dir.path().join(INDEX_FILE), index.to_string()).unwrap();
    let e = open_err(dir.path());
    assert!(
        matches!(&e, CheckpointError::Index { reason, .. } if reason.contains("x.0.weight") && reason.contains("two shards")),
        "{e}"
    );

    let dir = TempDir::new("absent-from-shard");
    let a = mixed_tensors("y", 12);
    write_sharded(dir.path(), &[("a.safetensors", &a)]);
    let index = serde_json::json!({ "weight_map": { "y.0.weight": "a.safetensors", "y.9.weight": "a.safetensors" }});
    fs::write(dir.path().join(INDEX_FILE), index.to_string()).unwrap();
    let e = open_err(dir.path());
    assert!(
        matches!(&e, CheckpointError::Index { reason, .. } if reason.contains("y.9.weight") && reason.contains("a.safetensors")),
        "{e}"
    );
}

#[test]
fn malformed_index_names_the_key() {
    let dir = TempDir::new("bad-index");
    let a = mixed_tensors("z", 13);
    write_sharded(dir.path(), &[("a.safetensors", &a)]);
    let cases = [
        (r#"{"metadata": {}}"#, "weight_map"),
        (r#"{"weight_map": {"z.0.weight": 3}}"#, "z.0.weight"),
        (r#"{"weight_map": {}}"#, "names no tensor"),
        (r#"{"weight_map": {"z.0.weight": "a.safetensors", "z.0.weight": "a.safetensors"}}"#, "appears twice"),
        (r#"{"weight_map": {"z.0.weight": "../a.safetensors"}}"#, "inside the directory"),
        (r#"{"weight_map": {"z.0.weight": "/etc/passwd"}}"#, "inside the directory"),
        (r#"{"weight_map": "#, "EOF"),
    ];
    for (text, word) in cases {
        fs::write(dir.path().join(INDEX_FILE), text).unwrap();
        let e = open_err(dir.path());
        assert!(matches!(&e, CheckpointError::Index { reason, .. } if reason.contains(word)), "{text}: {e}");
    }
}

#[test]
fn a_broken_shard_names_the_shard() {
    let dir = TempDir::new("broken-shard");
    let a = mixed_tensors("b", 14);
    write_sharded(dir.path(), &[("a.safetensors", &a)]);
    let path = dir.path().join("a.safetensors");
    let bytes = fs::read(&path).unwrap();
    fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
    let e = open_err(dir.path());
    assert!(matches!(&e, CheckpointError::Truncated { file, .. } if *file == path), "{e}");
}

// ---- properties --------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any f32 values stored as any float dtype read back as `half` converts them.
    #[test]
    fn any_values_convert_as_half_does(
        raw in prop::collection::vec(any::<u32>(), 0..64),
        dtype in prop::sample::select(FLOATS.to_vec()),
    ) {
        let values: Vec<f32> = raw.iter().map(|&b| f32::from_bits(b)).collect();
        let dir = TempDir::new("prop-values");
        let s = stored(dtype, &[values.len()], &values);
        let exact = stored_f32(&s);
        write_single(dir.path(), &[("w".to_owned(), s)]);
        let checkpoint = Checkpoint::open(dir.path()).unwrap();
        for target in TARGETS {
            let t = checkpoint.read("w", target, &[values.len()]).unwrap();
            prop_assert_eq!(bits(&t), expected_bits(&exact, target));
        }
    }

    /// Corrupting bytes of a good file's length field or header never panics: it opens (and
    /// then reads) or is a typed error.
    #[test]
    fn corrupted_headers_never_panic(
        edits in prop::collection::vec((0usize..200, any::<u8>()), 1..6),
        cut in 0usize..400,
    ) {
        let tensors = mixed_tensors("c", 15);
        let refs: Vec<(&str, &Stored)> = tensors.iter().map(|(n, s)| (n.as_str(), s)).collect();
        let mut bytes = serialize(&refs);
        let len = bytes.len();
        for (at, b) in edits {
            bytes[at % len] = b;
        }
        bytes.truncate(len - cut.min(len));
        let dir = TempDir::new("prop-corrupt");
        fs::write(dir.path().join(SINGLE_FILE), &bytes).unwrap();
        if let Ok(checkpoint) = Checkpoint::open(dir.path()) {
            for name in checkpoint.names().map(str::to_owned).collect::<Vec<_>>() {
                let shape = checkpoint.info(&name).unwrap().shape.clone();
                let _ = checkpoint.read(&name, DType::BF16, &shape);
            }
        }
    }
}
