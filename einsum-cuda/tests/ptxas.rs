//! Assembles every kernel's PTX to machine code with `ptxas` for sm_80 (A100) and sm_90
//! (H100/H200), no GPU needed, and reads its resource report: a kernel that spills registers
//! to local memory is slow however its arithmetic is written, so spills are refused.
//!
//! Ignored by default (NVRTC and ptxas are not part of the Rust toolchain); `.ci/run`
//! installs both from PyPI and runs it with `--include-ignored`, naming ptxas through
//! `EINSUMMABLE_PTXAS` (else `ptxas` is looked up on `PATH`), where a missing tool fails it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use einsum_cuda::availability::nvrtc_present;
use einsum_cuda::kernels::{compile::compile, sources};

/// The architectures every kernel is assembled for: NVRTC's virtual one and ptxas's real one.
const ARCHES: [(&str, &str); 2] = [("compute_80", "sm_80"), ("compute_90", "sm_90")];

/// Kernels that spill today, by `(kernel, head dim)`: the scalar attention kernel keeps a
/// whole query row and its accumulator per thread, which does not fit 255 registers at head
/// dims 128 and 256 (measured with CUDA 13.0's ptxas: 1,508 and 2,632 bytes of spill stores
/// and loads on sm_80, 1,444 and 2,528 on sm_90; none at 32 and 64). Issue 13 replaces it with a tiled tensor-core kernel; the test checks
/// that these still spill, so the entries must be deleted when they stop.
const KNOWN_SPILLS: &[(&str, usize)] = &[("attention", 128), ("attention", 256)];

/// Spill bytes (stores + loads) per function from `ptxas -v`'s report.
fn spills(report: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let mut function = None;
    for line in report.lines() {
        if let Some(rest) = line.split("Function properties for ").nth(1) {
            function = Some(rest.trim().to_string());
        } else if let (Some(f), true) = (&function, line.contains("bytes spill stores")) {
            let bytes: usize = line
                .split(',')
                .filter(|part| part.contains("spill"))
                .filter_map(|part| part.split_whitespace().next()?.parse::<usize>().ok())
                .sum();
            out.insert(f.clone(), bytes);
        }
    }
    out
}

fn ptxas() -> PathBuf {
    std::env::var_os("EINSUMMABLE_PTXAS").map_or_else(|| PathBuf::from("ptxas"), PathBuf::from)
}

/// Assembles `ptx` for `sm` and returns the spill bytes of each of its functions.
fn assemble(name: &str, ptx: &str, sm: &str) -> BTreeMap<String, usize> {
    let dir = std::env::temp_dir().join(format!("einsummable-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let file = dir.join(format!("{name}-{sm}.ptx"));
    std::fs::write(&file, ptx).expect("the PTX file");
    let output = Command::new(ptxas())
        .args(["-v", &format!("-arch={sm}"), "-o"])
        .arg(dir.join(format!("{name}-{sm}.cubin")))
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("could not run ptxas ({}): {e}; set EINSUMMABLE_PTXAS", ptxas().display()));
    let report = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "ptxas failed on {name} for {sm}:\n{report}");
    let found = spills(&report);
    assert!(!found.is_empty(), "ptxas reported no function for {name} on {sm}:\n{report}");
    found
}

#[test]
fn the_report_parser_reads_spills() {
    let report = "ptxas info    : Compiling entry function 'attention' for 'sm_80'\n\
                  ptxas info    : Function properties for attention\n\
                  \x20   704 bytes stack frame, 700 bytes spill stores, 688 bytes spill loads\n\
                  ptxas info    : Function properties for copy\n\
                  \x20   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n";
    let found = spills(report);
    assert_eq!(found.get("attention"), Some(&1388));
    assert_eq!(found.get("copy"), Some(&0));
}

#[test]
#[ignore = "needs NVRTC and ptxas; .ci/run runs it"]
fn every_kernel_assembles_without_spills() {
    assert!(nvrtc_present(), "no NVRTC found (libnvrtc.so could not be loaded)");
    let mut failures = Vec::new();
    for (compute, sm) in ARCHES {
        for module in sources::FIXED {
            let ptx = compile(&module, &[], Some(compute)).unwrap_or_else(|e| panic!("{e}"));
            for (function, bytes) in assemble(module.name, &ptx.to_src(), sm) {
                if bytes > 0 {
                    failures.push(format!("{function} ({}) on {sm}: {bytes} bytes of spills", module.name));
                }
            }
        }
        for d in [32, 64, 128, 256] {
            let ptx = compile(&sources::ATTENTION, &[("HEAD_DIM", d.to_string())], Some(compute))
                .unwrap_or_else(|e| panic!("{e}"));
            let bytes: usize = assemble(&format!("attention-{d}"), &ptx.to_src(), sm).values().sum();
            println!("attention, head dim {d:>3}, {sm}: {bytes} bytes of spill stores and loads");
            match (KNOWN_SPILLS.contains(&("attention", d)), bytes > 0) {
                (false, true) => failures.push(format!("attention at head dim {d} on {sm}: {bytes} bytes of spills")),
                (true, false) => failures
                    .push(format!("attention at head dim {d} on {sm} no longer spills: delete it from KNOWN_SPILLS")),
                _ => {}
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
