//! Reading a tensor costs the tensor, not the file: measured on the process's peak resident
//! set, so this test has a test binary (a process) of its own, where no other test allocates
//! while it measures.

use std::fs;

use einsum_core::DType;
use einsum_core::host_memory::{reset_peak_resident_set, resident_set};
use einsum_models::checkpoint::{Checkpoint, SINGLE_FILE};

mod common;
use common::TempDir;

/// Reading a tensor costs the tensor, not the file: the peak resident set while reading a
/// 64 MB bf16 tensor grows by its result plus at most 40 MB (the mapped pages of the chunk
/// converting), though every page of the tensor passes through the mapping; without
/// dropping the converted pages it would grow by the result plus the whole 64 MB. Linux only
/// (the peak is reset through /proc/self/clear_refs); elsewhere it is skipped.
#[test]
fn reading_costs_the_tensor_not_the_file() {
    use std::io::Write;
    const MB: usize = 1 << 20;
    let dir = TempDir::new("memory");
    let len = 32usize << 20; // bf16 elements: 64 MB
    let header = format!(
        r#"{{"a":{{"dtype":"BF16","shape":[{len}],"data_offsets":[0,{end}]}},"b":{{"dtype":"F32","shape":[2],"data_offsets":[{end},{b_end}]}}}}"#,
        end = 2 * len,
        b_end = 2 * len + 8
    );
    let mut file = fs::File::create(dir.path().join(SINGLE_FILE)).unwrap();
    file.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
    file.write_all(header.as_bytes()).unwrap();
    let block: Vec<u8> = (0..MB).map(|i| (i % 251) as u8).collect();
    for _ in 0..2 * len / MB {
        file.write_all(&block).unwrap();
    }
    file.write_all(&[0; 8]).unwrap();
    drop(file);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    for (dtype, result) in [(DType::BF16, 2 * len), (DType::F32, 4 * len)] {
        if !reset_peak_resident_set() {
            eprintln!("cannot reset the peak resident set; not measured");
            return;
        }
        let Some((before, _)) = resident_set() else { return };
        let t = checkpoint.read("a", dtype, &[len]).unwrap();
        let (_, peak) = resident_set().unwrap();
        let grown = peak.saturating_sub(before);
        eprintln!("a as {dtype}: result {} MB, peak grew {} MB", result / MB, grown / MB);
        assert!(grown < result + 40 * MB, "a as {dtype}: peak grew {grown} bytes for a {result}-byte result");
        assert_eq!(t.len(), len);
    }
}
