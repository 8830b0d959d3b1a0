//! `--trace FILE` on `plan`, `run` and `explain`: the file is Chrome trace JSON whose
//! simulated process names a track for every device and every resource a transfer crosses,
//! ends at the predicted time, and (on `run`) sits beside a measured process with slices on
//! every device.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

/// The default workload of `run` (`src/cli/run.rs`), which `plan` takes as given.
const DEFAULT_BLOCK: &str = "llama-block:tokens=1024,seqs=2,d_model=512,heads_q=8,heads_kv=4,d_head=64,d_ff=1536";

/// The devices of the default block's plan (the command line's default).
const DEVICES: usize = 8;

fn einsummable(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_einsummable")).args(args).output().expect("the binary runs")
}

/// A path in the temporary directory for this test process's `name`, removed first.
fn scratch(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("einsummable-trace-{}-{name}.json", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// Runs `args` with `--json` and `--trace PATH`; returns the `--json` object and the trace.
fn traced(args: &[&str], name: &str) -> (Value, Value) {
    let path = scratch(name);
    let mut all = args.to_vec();
    all.extend(["--json", "--trace", path.to_str().expect("a UTF-8 temporary path")]);
    let out = einsummable(&all);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    let text = std::fs::read_to_string(&path).expect("the trace file was written");
    let _ = std::fs::remove_file(&path);
    (json, serde_json::from_str(&text).expect("the trace file is JSON"))
}

/// A trace's processes by name, its tracks' names by `(pid, tid)`, and its complete events.
struct Parsed<'a> {
    processes: BTreeMap<String, u64>,
    tracks: BTreeMap<(u64, u64), String>,
    slices: Vec<&'a Value>,
}

fn parse(trace: &Value) -> Parsed<'_> {
    assert_eq!(trace["displayTimeUnit"], "ms");
    let events = trace["traceEvents"].as_array().expect("traceEvents is a list");
    let id = |e: &Value, key: &str| e[key].as_u64().unwrap_or_else(|| panic!("{key} of {e}"));
    let named = |e: &Value| e["args"]["name"].as_str().unwrap_or_else(|| panic!("a name: {e}")).to_string();
    let meta = |what: &'static str| events.iter().filter(move |e| e["ph"] == "M" && e["name"] == what);
    let processes = meta("process_name").map(|e| (named(e), id(e, "pid"))).collect();
    let tracks = meta("thread_name").map(|e| ((id(e, "pid"), id(e, "tid")), named(e))).collect();
    let slices: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    for e in &slices {
        let (ts, dur) = (e["ts"].as_f64(), e["dur"].as_f64());
        assert!(ts.is_some_and(|t| t.is_finite() && t >= 0.0), "ts of {e}");
        assert!(dur.is_some_and(|d| d.is_finite() && d >= 0.0), "dur of {e}");
        assert!(e["name"].as_str().is_some_and(|n| !n.is_empty()), "a slice is named: {e}");
    }
    Parsed { processes, tracks, slices }
}

impl Parsed<'_> {
    /// The pid of the one process whose name starts with `prefix`.
    fn pid(&self, prefix: &str) -> u64 {
        let found: Vec<u64> = self.processes.iter().filter(|(n, _)| n.starts_with(prefix)).map(|(_, &p)| p).collect();
        assert_eq!(found.len(), 1, "one process named {prefix}...: {:?}", self.processes);
        found[0]
    }

    /// The track name of a slice, without its lane's ` (n)` suffix.
    fn track(&self, e: &Value) -> &str {
        let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        let name = self.tracks.get(&key).unwrap_or_else(|| panic!("the track of {e} is named"));
        match name.rsplit_once(" (") {
            Some((base, lane)) if lane.ends_with(')') && lane[..lane.len() - 1].parse::<usize>().is_ok() => base,
            _ => name,
        }
    }

    /// The slices of process `pid`.
    fn of(&self, pid: u64) -> impl Iterator<Item = &&Value> {
        self.slices.iter().filter(move |e| e["pid"] == pid)
    }

    /// The base names of the tracks of process `pid` that hold a slice.
    fn used_tracks(&self, pid: u64) -> BTreeSet<&str> {
        self.of(pid).map(|e| self.track(e)).collect()
    }
}

/// The simulated process of `trace`: a named track with slices for every device, every
/// resource a task crossed named and holding that task, at least one transfer on a link's
/// track, and the last slice ending at `predicted_ms`. Returns the parsed trace.
fn check_simulated(trace: &Value, predicted_ms: f64) -> Parsed<'_> {
    let parsed = parse(trace);
    let sim = parsed.pid("simulated");
    let used = parsed.used_tracks(sim);
    for d in 0..DEVICES {
        assert!(used.contains(format!("device {d}").as_str()), "device {d} has simulated slices: {used:?}");
    }
    // Every resource a task crossed is a track holding that task.
    let mut on: BTreeMap<u64, BTreeSet<&str>> = BTreeMap::new();
    for e in parsed.of(sim) {
        on.entry(e["args"]["task"].as_u64().expect("a task id")).or_default().insert(parsed.track(e));
    }
    let mut crossings = 0;
    for e in parsed.of(sim) {
        let Some(resources) = e["args"]["resources"].as_array() else { continue };
        let task = e["args"]["task"].as_u64().unwrap();
        for r in resources {
            let r = r.as_str().expect("a resource name");
            assert!(on[&task].contains(r), "task {task} crossed {r} but is not on its track: {:?}", on[&task]);
            crossings += 1;
        }
    }
    let transfers: Vec<&&Value> = parsed.of(sim).filter(|e| e["cat"] == "transfer").collect();
    assert!(!transfers.is_empty() && crossings > 0, "the plan moves data between devices");
    assert!(
        transfers.iter().all(|e| !parsed.track(e).starts_with("device ")),
        "transfers are on the tracks of the resources they cross"
    );
    let makespan_us =
        parsed.of(sim).map(|e| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap()).fold(0.0, f64::max);
    let predicted_us = predicted_ms * 1e3;
    assert!(
        (makespan_us - predicted_us).abs() <= 1e-9 * predicted_us,
        "the simulated schedule ends at {makespan_us} µs, the prediction is {predicted_us} µs"
    );
    assert_eq!(trace["otherData"]["predicted_ms"].as_f64(), Some(predicted_ms));
    parsed
}

#[test]
fn plan_traces_the_simulated_schedule() {
    let (json, trace) = traced(&["plan", DEFAULT_BLOCK], "plan");
    assert_eq!(json["devices"], DEVICES);
    let parsed = check_simulated(&trace, json["predicted_ms"].as_f64().expect("the plan was compiled"));
    assert_eq!(parsed.processes.len(), 1, "plan measures nothing: {:?}", parsed.processes);
}

#[test]
fn run_traces_the_simulated_and_the_measured_schedule() {
    let (json, trace) = traced(&["run"], "run");
    assert_eq!(json["workload"], DEFAULT_BLOCK, "the default block");
    let parsed = check_simulated(&trace, json["predicted_ms"].as_f64().expect("a prediction"));
    let (sim, measured) = (parsed.pid("simulated"), parsed.pid("measured"));
    assert_ne!(sim, measured);
    let used = parsed.used_tracks(measured);
    for d in 0..DEVICES {
        assert!(used.contains(format!("device {d}").as_str()), "device {d} has measured slices: {used:?}");
    }
    assert!(used.iter().all(|t| t.starts_with("device ")), "measured tracks are devices: {used:?}");
    for e in parsed.of(measured) {
        assert!(e["args"]["worker"].as_u64().is_some(), "the worker thread of {e}");
    }
    // A run's kernels are measured: as many as the plan has (fusion may merge some).
    let count = |pid: u64, cat: &str| parsed.of(pid).filter(|e| e["cat"] == cat).count();
    assert!(count(measured, "kernel") > 0 && count(measured, "kernel") <= count(sim, "kernel"));
}

#[test]
fn explain_traces_and_a_bad_path_is_a_typed_error() {
    let workload = "llama-block:tokens=64,seqs=2,d_model=64,heads_q=8,heads_kv=4,d_head=8,d_ff=128";
    let (json, trace) = traced(&["explain", workload], "explain");
    check_simulated(&trace, json["predicted_ms"].as_f64().expect("a prediction"));
    // A directory is refused with the file error, not a panic.
    let dir = std::env::temp_dir();
    let out = einsummable(&["explain", workload, "--trace", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&dir.display().to_string()) && !err.contains("panicked"), "{err}");
}
