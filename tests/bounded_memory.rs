//! Inputs too large for the machine are refused from an estimate, before they are allocated,
//! with an error that says so (one JSON object with `--json`), instead of building until an
//! allocation aborts the process (exit 134, no JSON). Every command here runs under an
//! address-space limit of 8 GB (`ulimit -v`), so that a regression aborts the one command
//! instead of exhausting the machine; the limit is part of the memory
//! `einsum_core::host_memory` reports.

use std::process::{Command, Output};

/// The address-space limit of every command, in KiB (8 GB).
const ULIMIT_KB: u64 = 8_000_000;

/// `einsummable args` under the address-space limit.
fn limited(args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {ULIMIT_KB} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_einsummable"))
        .args(args)
        .output()
        .expect("sh runs")
}

/// The one JSON object of a `--json` command that failed: its error message.
fn json_error(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    v["error"].as_str().expect("an error message").to_string()
}

/// The reproduction: `plan llama:layers=1000000` built its 25-million-node graph
/// until an allocation failed. The task limit is now checked from the workload's parameters
/// first; on more devices than the topology has (no compile, so no task limit) the graph's
/// estimated bytes are refused against the host memory instead.
#[test]
fn a_million_layer_plan_is_refused_before_its_graph_is_built() {
    let out = limited(&["plan", "llama:layers=1000000", "--json"]);
    let error = json_error(&out);
    let limit = format!("limit of {}", einsum_compile::footprint::LIMITS.tasks);
    assert!(error.contains("at least 368000000 tasks") && error.contains(&limit), "{error}");
    assert!(error.contains("refused before building its graph"), "{error}");

    let out = limited(&["plan", "llama:layers=1000000", "--devices", "9", "--topology", "dgx-h100", "--json"]);
    let error = json_error(&out);
    assert!(error.contains("25000001 nodes") && error.contains("bytes of host memory"), "{error}");
}

/// The other reproduction: searching a program for a broadcast of 10 000 atoms asked
/// for 12.9 GB in one allocation and aborted. Its state is now estimated first (about 27 GB,
/// more than half of what the limit leaves), so the search keeps the naive program and the
/// result says why.
#[test]
fn a_search_too_large_for_memory_keeps_the_naive_program() {
    const ATOMS: usize = 10_000;
    let inputs: Vec<String> = (0..ATOMS).map(|i| format!("A{i} @ 0")).collect();
    let outputs: Vec<String> = (0..ATOMS).flat_map(|i| (1..8).map(move |s| format!("A{i} @ {s}"))).collect();
    let path = std::env::temp_dir().join(format!("einsummable-broadcast-{}.exprog", std::process::id()));
    let text = format!("GPUS: 0, 1, 2, 3, 4, 5, 6, 7\nIN: {}\nOUT: {}\n", inputs.join("; "), outputs.join("; "));
    std::fs::write(&path, text).unwrap();
    let out = limited(&["exprog", "synthesize", path.to_str().unwrap(), "--topology", "dgx-h100", "--json"]);
    std::fs::remove_file(&path).ok();
    assert!(out.status.success(), "{:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    assert_eq!(
        (v["mode"].as_str(), v["origin"].as_str(), v["evaluated"].as_u64()),
        (Some("search"), Some("naive"), Some(1))
    );
    let why = v["fallback"].as_str().expect("the reason the search did not run");
    assert!(why.contains("10000 atoms") && why.contains("kept the naive program"), "{why}");
    assert_eq!(v["completion_ms"], v["naive_ms"]);
}
