//! Assembles every kernel's PTX to machine code with `ptxas` for sm_80 (A100) and sm_90
//! (H100/H200), no GPU needed, and reads its resource report: a kernel that keeps data in
//! local memory is slow however its arithmetic is written, so spills are refused, and so is a
//! stack frame (what a register array becomes when a loop indexing it is not unrolled: the
//! tensor-core attention kernel ran 2.7 times slower on an H200 with 864 bytes of one and no
//! spill).
//!
//! Ignored by default (NVRTC and ptxas are not part of the Rust toolchain); `.ci/run`
//! installs both from PyPI and runs it with `--include-ignored`, naming ptxas through
//! `EINSUMMABLE_PTXAS` (else `ptxas` is looked up on `PATH`), where a missing tool fails it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use einsum_cuda::availability::nvrtc_present;
use einsum_cuda::kernels::attention::{AttentionModule, MMA_HEAD_DIMS};
use einsum_cuda::kernels::{compile::compile, sources};

/// Both attention kernels at every head dim they are compiled for in practice (LLaMA's 128,
/// the 64 of smaller models, 256, and an odd 48 on CUDA cores).
fn attention_modules() -> Vec<AttentionModule> {
    let simt = [32, 48, 64, 128, 256].map(|head_dim| AttentionModule { tensor_cores: false, head_dim });
    let mma = MMA_HEAD_DIMS.map(|head_dim| AttentionModule { tensor_cores: true, head_dim });
    simt.into_iter().chain(mma).collect()
}

/// The architectures every kernel is assembled for: NVRTC's virtual one and ptxas's real one.
const ARCHES: [(&str, &str); 2] = [("compute_80", "sm_80"), ("compute_90", "sm_90")];

/// Local-memory bytes (stack frame, spill stores and spill loads) per function from
/// `ptxas -v`'s report.
fn local_bytes(report: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let mut function = None;
    for line in report.lines() {
        if let Some(rest) = line.split("Function properties for ").nth(1) {
            function = Some(rest.trim().to_string());
        } else if let (Some(f), true) = (&function, line.contains("bytes spill stores")) {
            let bytes: usize = line
                .split(',')
                .filter(|part| part.contains("spill") || part.contains("stack frame"))
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

/// Assembles `ptx` for `sm` and returns the local-memory bytes of each of its functions.
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
    let found = local_bytes(&report);
    assert!(!found.is_empty(), "ptxas reported no function for {name} on {sm}:\n{report}");
    found
}

#[test]
fn the_report_parser_reads_stack_frames_and_spills() {
    let report = "ptxas info    : Compiling entry function 'attention' for 'sm_80'\n\
                  ptxas info    : Function properties for attention\n\
                  \x20   704 bytes stack frame, 700 bytes spill stores, 688 bytes spill loads\n\
                  ptxas info    : Function properties for copy\n\
                  \x20   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n";
    let found = local_bytes(report);
    assert_eq!(found.get("attention"), Some(&2092));
    assert_eq!(found.get("copy"), Some(&0));
}

#[test]
#[ignore = "needs NVRTC and ptxas; .ci/run runs it"]
fn every_kernel_assembles_without_local_memory() {
    assert!(nvrtc_present(), "no NVRTC found (libnvrtc.so could not be loaded)");
    let mut failures = Vec::new();
    for (compute, sm) in ARCHES {
        for module in sources::FIXED {
            let ptx = compile(&module, &[], Some(compute)).unwrap_or_else(|e| panic!("{e}"));
            for (function, bytes) in assemble(module.name, &ptx.to_src(), sm) {
                if bytes > 0 {
                    failures.push(format!("{function} ({}) on {sm}: {bytes} bytes of local memory", module.name));
                }
            }
        }
        for module in attention_modules() {
            let (source, defines) = module.source();
            let ptx = compile(source, &defines, Some(compute)).unwrap_or_else(|e| panic!("{e}"));
            let name = format!("{}-{}", source.name, module.head_dim);
            for (function, bytes) in assemble(&name, &ptx.to_src(), sm) {
                println!("{function}, head dim {:>3}, {sm}: {bytes} bytes of stack frame and spills", module.head_dim);
                if bytes > 0 {
                    failures.push(format!(
                        "{function} at head dim {} on {sm}: {bytes} bytes of local memory",
                        module.head_dim
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
