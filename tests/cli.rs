//! The command line: JSON on stdout, non-zero exit codes on failure.

use std::process::Command;

fn einsummable(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_einsummable")).args(args).output().expect("the binary runs")
}

#[test]
fn check_prints_one_json_object() {
    let out = einsummable(&["check", "ffn:tokens=8,d_model=4,d_ff=8", "--devices", "4", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    assert_eq!(v["devices"], 4);
    assert_eq!(v["passed"], true);
    assert_eq!(v["ops"].as_array().unwrap().len(), 3);
}

#[test]
fn specs_lists_the_3d_split_of_a_matmul() {
    let out = einsummable(&["specs", "matmul:n=8", "--devices", "8", "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let specs = v["ops"][0]["specs"].as_array().unwrap();
    assert!(specs.iter().any(|s| s["splits"]["m"] == 2 && s["splits"]["k"] == 2 && s["splits"]["n"] == 2));
}

#[test]
fn bad_input_exits_non_zero_with_a_message() {
    let out = einsummable(&["check", "mlp:n=3"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown workload") && err.contains("llama-block"), "{err}");

    let out = einsummable(&["specs", "matmul:m=2,k=3,n=5", "--devices", "7", "--json"]);
    assert!(!out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["error"].as_str().unwrap().contains("p = 7"));
}

#[test]
fn plan_reports_splits_and_costs_as_json() {
    // The DP's own choice (`--refine 0`): the proxy's optimum, which the simulator would
    // overrule (see `plan_refines_the_dp_by_whole_plan_prediction`).
    let out = einsummable(&["plan", "matmul:n=64", "--devices", "8", "--cost", "proxy", "--refine", "0", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["optimizer"], "dp");
    assert_eq!(v["cost_model"], "proxy");
    assert_eq!(v["total_cost"], 5.0 * 64.0 * 64.0);
    let op = &v["ops"][0];
    assert_eq!(op["splits"]["m"], 2);
    assert!(op["cost"]["join"].as_f64().unwrap() > 0.0);
    assert!(v["optimize_ms"].as_f64().is_some());
}

/// On 8 devices the paper's proxy prices a 64³ matmul split 2×2×2 (k included) below a
/// 2×4 split of m and n, which it charges 20% more; the simulator predicts the k split 3.5×
/// slower (the partial sums' aggregation and its latencies). The refinement scores the DP's
/// alternatives by whole-plan prediction and takes the faster plan; `--refine 0` keeps the
/// model's.
#[test]
fn plan_refines_the_dp_by_whole_plan_prediction() {
    let plan = |refine: &str| {
        let out =
            einsummable(&["plan", "matmul:n=64", "--devices", "8", "--cost", "proxy", "--refine", refine, "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let (model, refined) = (plan("0"), plan("8"));
    let ms = |v: &serde_json::Value| v["predicted_ms"].as_f64().unwrap();
    assert!(ms(&refined) < 0.5 * ms(&model), "{} against {}", ms(&refined), ms(&model));
    assert!(refined["total_cost"].as_f64().unwrap() > model["total_cost"].as_f64().unwrap());
    assert_eq!(model["ops"][0]["splits"]["k"], 2);
    assert_eq!(refined["ops"][0]["splits"]["k"], 1);
    assert_eq!(refined["optimizer"], "dp");
    assert!(model["refinement"].is_null(), "{}", model["refinement"]);
    let r = &refined["refinement"];
    assert_eq!(r["replaced"], true);
    assert!(r["scored"].as_u64().unwrap() >= 1);
    assert_eq!(r["own_naive_ms"], model["predicted_ms"]);
}

#[test]
fn plan_rejects_bad_input_with_non_zero_exit() {
    for args in [
        &["plan", "matmul:n=64", "--devices", "0"][..],
        &["plan", "matmul:m=2,k=3,n=5", "--devices", "7"][..],
        &["plan", "matmul:n=64", "--optimizer", "annealing"][..],
        &["plan", "matmul:n=64", "--cost", "flops"][..],
        &["plan", "matmul:n=64", "--topology", "dgx-b200"][..],
    ] {
        let out = einsummable(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error: "), "{args:?}: {err}");
    }
    let err =
        String::from_utf8_lossy(&einsummable(&["plan", "matmul:n=64", "--optimizer", "annealing"]).stderr).to_string();
    assert!(err.contains("dp, greedy, random, ilp"), "{err}");
}

#[test]
fn every_optimizer_runs_on_a_chain() {
    for opt in ["dp", "greedy", "random", "ilp"] {
        let out = einsummable(&["plan", "chain-c:scale=256", "--devices", "4", "--optimizer", opt, "--json"]);
        assert!(out.status.success(), "{opt}: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["ops"].as_array().unwrap().len(), 2);
    }
}

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/einsum-exprog/examples");

#[test]
fn exprog_simulate_reproduces_example_5_3() {
    let file = format!("{EXAMPLES}/example_5_3_v100_placement.exprog");
    let out = einsummable(&["exprog", "simulate", &file, "--topology", "dgx-v100", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], true);
    let ms = v["completion_ms"].as_f64().unwrap();
    assert!((ms - 67.0).abs() / 67.0 < 0.03, "{ms}");
    assert_eq!(v["bridge_bytes"], 0.0);
    assert_eq!(v["membership"]["G1"], serde_json::json!([0, 1, 4, 5]));
    assert!(v["transfer_ms"].as_f64().unwrap() > 0.0);
}

#[test]
fn exprog_synthesize_returns_a_program_that_checks() {
    let file = format!("{EXAMPLES}/example_5_4_preamble.exprog");
    for mode in ["naive", "search"] {
        let out = einsummable(&[
            "exprog",
            "synthesize",
            &file,
            "--topology",
            "dgx-a100",
            "--synthesizer",
            mode,
            "--iterations",
            "20",
            "--json",
        ]);
        assert!(out.status.success(), "{mode}: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["mode"], mode);
        assert!(v["completion_ms"].as_f64().unwrap() > 0.0);
        let program = v["program"].as_str().unwrap();
        let path = std::env::temp_dir().join(format!("einsummable-cli-{mode}-{}.exprog", std::process::id()));
        std::fs::write(&path, program).unwrap();
        let check = einsummable(&["exprog", "check", path.to_str().unwrap()]);
        std::fs::remove_file(&path).ok();
        assert!(check.status.success(), "{mode}: {}", String::from_utf8_lossy(&check.stderr));
    }
}

#[test]
fn exprog_errors_name_the_line_and_exit_non_zero() {
    let path = std::env::temp_dir().join(format!("einsummable-cli-bad-{}.exprog", std::process::id()));
    std::fs::write(&path, "IN: A @ 0\nOUT: A @ 1\nA 0 -> 1\n").unwrap();
    let out = einsummable(&["exprog", "check", path.to_str().unwrap()]);
    std::fs::remove_file(&path).ok();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 3"));
    let out = einsummable(&["exprog", "simulate", "/no/such/file.exprog", "--topology", "dgx-h100"]);
    assert!(!out.status.success());
    let file = format!("{EXAMPLES}/example_5_1_swap.exprog");
    let out = einsummable(&["exprog", "simulate", &file, "--topology", "dgx-b200"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("dgx-a100"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn run_checks_against_the_reference_and_dumps_npy() {
    let dir = std::env::temp_dir().join(format!("einsummable-dump-{}", std::process::id()));
    let workload = "llama-block:tokens=16,seqs=2,d_model=16,heads_q=4,heads_kv=2,d_head=4,d_ff=24";
    let out = einsummable(&["run", workload, "--devices", "4", "--check", "--json", "--dump", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "workload",
        "devices",
        "ok",
        "max_rel_error",
        "wall_ms",
        "predicted_ms",
        "bytes_moved",
        "peak_bytes_per_device",
        "resident_bytes_per_device",
        "transient_peak_bytes_per_device",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    let per_device =
        |key: &str| -> Vec<u64> { v[key].as_array().unwrap().iter().map(|b| b.as_u64().unwrap()).collect() };
    let (peak, resident, transient) = (
        per_device("peak_bytes_per_device"),
        per_device("resident_bytes_per_device"),
        per_device("transient_peak_bytes_per_device"),
    );
    assert!(resident.iter().all(|&r| r > 0), "every device holds input blocks: {resident:?}");
    assert_eq!(peak, resident.iter().zip(&transient).map(|(r, t)| r + t).collect::<Vec<_>>());
    assert_eq!(v["ok"], true);
    assert!(v["max_rel_error"].as_f64().unwrap() <= 1e-4);
    assert_eq!(v["peak_bytes_per_device"].as_array().unwrap().len(), 4);
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let tensors = manifest["tensors"].as_array().unwrap();
    assert!(
        tensors.iter().any(|t| t["name"] == "x" && t["role"] == "input" && t["shape"] == serde_json::json!([16, 16]))
    );
    assert!(tensors.iter().any(|t| t["role"] == "output"));
    let x = std::fs::read(dir.join("x.npy")).unwrap();
    assert_eq!(&x[..6], b"\x93NUMPY");
    std::fs::remove_dir_all(&dir).ok();
}

/// An output path names what the user points at: `--dot` through a symlink writes its target
/// and keeps the link, `--dot /dev/null` discards and leaves the device a device, and a FIFO
/// is refused at once with the reason (writing would wait for a reader).
#[cfg(unix)]
#[test]
fn outputs_respect_links_devices_and_fifos() {
    use std::os::unix::fs::FileTypeExt;
    let dir = std::env::temp_dir().join(format!("einsummable-outputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let explain = |dot: &std::path::Path| {
        einsummable(&["explain", "matmul:n=64", "--devices", "2", "--dot", dot.to_str().unwrap()])
    };
    let (target, link) = (dir.join("graph.dot"), dir.join("link.dot"));
    std::fs::write(&target, b"").unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert!(explain(&link).status.success());
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert!(std::fs::read_to_string(&target).unwrap().starts_with("digraph tasks"));
    assert!(explain(std::path::Path::new("/dev/null")).status.success());
    assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
    let fifo = dir.join("fifo.dot");
    if Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
        let out = explain(&fifo);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("is a FIFO"), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `--help` and `--version` with `--json` print one JSON object holding their text.
#[test]
fn help_with_json_is_one_json_object() {
    for args in [&["plan", "--help", "--json"][..], &["--json", "--version"]] {
        let out = einsummable(args);
        assert!(out.status.success(), "{args:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
        assert!(v["help"].as_str().is_some_and(|h| !h.is_empty()), "{args:?}: {v}");
    }
    let v: serde_json::Value = serde_json::from_slice(&einsummable(&["plan", "--help", "--json"]).stdout).unwrap();
    assert!(v["help"].as_str().unwrap().contains("Usage"), "{v}");
}

/// A file in the working directory named like a preset does not replace the preset: the
/// name is the preset, `./NAME` the file.
#[test]
fn a_preset_is_not_shadowed_by_a_file_of_its_name() {
    let dir = std::env::temp_dir().join(format!("einsummable-shadow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("dgx-a100"), "not a topology").unwrap();
    let plan = |topology: &str| {
        Command::new(env!("CARGO_BIN_EXE_einsummable"))
            .current_dir(&dir)
            .args(["plan", "matmul:n=64", "--devices", "2", "--topology", topology, "--json"])
            .output()
            .expect("the binary runs")
    };
    let out = plan("dgx-a100");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = plan("./dgx-a100");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("./dgx-a100"), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn explain_prints_plan_programs_and_a_dot_graph() {
    let dot = std::env::temp_dir().join(format!("einsummable-{}.dot", std::process::id()));
    let out =
        einsummable(&["explain", "ffn:tokens=16,d_model=8,d_ff=16", "--devices", "2", "--dot", dot.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("logical plan") && text.contains("exchange programs") && text.contains("PARTITIONS"),
        "{text}"
    );
    assert!(text.contains("resident inputs + transient peak = peak") && text.contains("  device 1: "), "{text}");
    let out = einsummable(&["explain", "ffn:tokens=16,d_model=8,d_ff=16", "--devices", "2", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in ["peak_bytes_per_device", "resident_bytes_per_device", "transient_peak_bytes_per_device"] {
        assert_eq!(v[key].as_array().map(Vec::len), Some(2), "{key}");
    }
    let graph = std::fs::read_to_string(&dot).unwrap();
    assert!(graph.starts_with("digraph tasks") && graph.contains("->"));
    std::fs::remove_file(&dot).ok();
    // A named topology too small for the devices is not scaled: the typed error says so.
    let out = einsummable(&["run", "ffn:tokens=16,d_model=8,d_ff=16", "--devices", "16", "--topology", "dgx-a100"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("topology `dgx-a100` has 8 sites, fewer than the 16 devices"), "{err}");
}

/// A LLaMA block (the default workload's operators, smaller) on 16 virtual devices.
const SMALL_BLOCK: &str = "llama-block:tokens=64,seqs=2,d_model=64,heads_q=8,heads_kv=4,d_head=8,d_ff=128";

/// Without `--topology`, 16 devices get the default machine scaled to two nodes: the text
/// says so, the JSON names it, and the CPU backend runs and checks all 16 devices.
#[test]
fn run_on_16_devices_scales_the_default_machine_to_two_nodes() {
    let out = einsummable(&["run", SMALL_BLOCK, "--devices", "16", "--check"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.starts_with("topology dgx-a100x2: no --topology given, so the default dgx-a100 scaled to 2 nodes"),
        "{text}"
    );
    assert!(text.contains("on 16 devices") && text.contains("on dgx-a100x2") && text.contains("(PASS)"), "{text}");

    let (_, v) = report(&einsummable(&["run", SMALL_BLOCK, "--devices", "16", "--check", "--json"]));
    assert_eq!(
        (v["topology"].as_str(), v["devices"].as_u64(), v["ok"].as_bool()),
        (Some("dgx-a100x2"), Some(16), Some(true))
    );
    assert_eq!(v["peak_bytes_per_device"].as_array().map(Vec::len), Some(16));
    assert!(v["tasks"]["transfer"].as_u64() > Some(0), "{v}");
    // Up to 8 devices the default is the single node, and the text has no note.
    let (_, v) = report(&einsummable(&["run", "matmul:n=16", "--devices", "8", "--json"]));
    assert_eq!(v["topology"], "dgx-a100");
    let text = String::from_utf8_lossy(&einsummable(&["run", "matmul:n=16", "--devices", "8"]).stdout).to_string();
    assert!(!text.contains("no --topology given") && text.contains("on dgx-a100\n"), "{text}");
}

/// `plan` and `explain` choose the same way; a named multi-node preset is kept as given;
/// bad node counts and unknown names are typed errors that list the forms.
#[test]
fn plan_and_explain_scale_the_default_and_accept_node_presets() {
    let (_, v) = report(&einsummable(&["plan", "matmul:n=64", "--devices", "24", "--json"]));
    assert_eq!(v["topology"], "dgx-a100x3");
    assert!(v["compile_error"].is_null() && v["predicted_ms"].is_f64(), "{v}");
    let text = String::from_utf8_lossy(&einsummable(&["plan", "matmul:n=64", "--devices", "24"]).stdout).to_string();
    assert!(text.starts_with("topology dgx-a100x3: no --topology given") && text.contains("on dgx-a100x3"), "{text}");
    let (_, v) = report(&einsummable(&["explain", "ffn:tokens=16,d_model=8,d_ff=16", "--devices", "12", "--json"]));
    assert_eq!(v["topology"], "dgx-a100x2");
    let (_, v) =
        report(&einsummable(&["plan", "matmul:n=64", "--devices", "16", "--topology", "dgx-h100x4", "--json"]));
    assert_eq!(v["topology"], "dgx-h100x4");
    assert!(v["compile_error"].is_null(), "{v}");
    let (_, v) = report(&einsummable(&["plan", "matmul:n=64", "--devices", "64", "--topology", "nvl72", "--json"]));
    assert_eq!(v["topology"], "nvl72");
    assert!(v["compile_error"].is_null(), "{v}");
    fails_with(&["plan", "matmul:n=64", "--topology", "dgx-a100x0"], "a machine needs at least one node");
    fails_with(&["run", "matmul:n=8", "--topology", "dgx-b200"], "dgx-a100xN, dgx-h100xN (N nodes of 8 GPUs)");
}

/// `--cost-topology` prices the plan on one machine and compiles and predicts it on
/// `--topology`: naming the same machine changes nothing; naming a slower one raises the
/// model's cost while the prediction stays on `--topology`.
#[test]
fn plan_prices_one_machine_and_predicts_on_another() {
    let plan = |extra: &[&str]| {
        let mut args = vec!["plan", "ffn:tokens=256,d_model=128,d_ff=512", "--topology", "dgx-h100", "--json"];
        args.extend_from_slice(extra);
        report(&einsummable(&args)).1
    };
    let alone = plan(&[]);
    let same = plan(&["--cost-topology", "dgx-h100"]);
    for key in ["total_cost", "predicted_ms", "ops", "topology"] {
        assert_eq!(alone[key], same[key], "{key}");
    }
    let v100 = plan(&["--cost-topology", "dgx-v100"]);
    assert_eq!(v100["topology"], "dgx-h100");
    assert!(v100["total_cost"].as_f64().unwrap() > alone["total_cost"].as_f64().unwrap(), "{v100}");
    assert!(v100["predicted_ms"].is_f64(), "{v100}");
    let text = String::from_utf8_lossy(
        &einsummable(&["plan", "matmul:n=64", "--topology", "dgx-h100", "--cost-topology", "dgx-v100"]).stdout,
    )
    .to_string();
    assert!(
        text.contains("the cost model prices `dgx-v100`; the plan is compiled for and predicted on `dgx-h100`"),
        "{text}"
    );
    fails_with(&["plan", "matmul:n=64", "--cost-topology", "dgx-b200"], "dgx-b200");
}

/// `--help` lists every preset and form of `--topology`, and the scaled default.
#[test]
fn help_lists_the_presets_and_the_default() {
    for command in ["run", "plan", "explain"] {
        let out = einsummable(&[command, "--help"]);
        let help = String::from_utf8_lossy(&out.stdout).replace(char::is_whitespace, "");
        for name in ["dgx-a100", "dgx-h100", "dgx-v100", "nvl72", "dgx-a100xN", "dgx-h100xN"] {
            assert!(help.contains(name), "{command}: {name} missing from\n{help}");
        }
        assert!(
            help.contains("[default:dgx-a100,ordgx-a100xNwiththefewestnodesNthathold--devices]"),
            "{command}: {help}"
        );
    }
}

/// Runs a command that must fail: non-zero exit, no panic, stdout holding only the `--json`
/// error object, and stderr containing `want`.
fn fails_with(args: &[&str], want: &str) {
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let out = einsummable(&with_json);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(err.starts_with("error: ") && err.contains(want), "{args:?}\n got: {err}\nwant: {want}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    assert!(v["error"].as_str().unwrap().contains(want), "{args:?}: {v}");
}

#[test]
fn adversarial_inputs_fail_fast_with_typed_errors() {
    let dir = std::env::temp_dir().join(format!("einsummable-cli-harden-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a-file");
    std::fs::write(&file, "").unwrap();
    let file = file.to_str().unwrap();
    // A machine with room for a 16 TB matmul per device, so only the host can refuse it.
    let roomy = dir.join("roomy.json");
    std::fs::write(
        &roomy,
        r#"{"name": "roomy", "sites": 2, "site": {"hbm_gbps": 900, "hbm_gb": 1e5, "tflops": {"f16": 1, "bf16": 1, "f32": 1}}, "fallback": {"shared": "bus", "gbps": 10}}"#,
    )
    .unwrap();
    let empty = dir.join("empty.exprog");
    std::fs::write(&empty, "# nothing\n").unwrap();

    fails_with(&["plan", "matmul:n=3,n=4"], "`n` is given twice");
    fails_with(&["plan", "matmul:n=99999999999999999999"], "value of `n` is too large");
    fails_with(&["plan", "matmul:n=64", "--topology", "/no/such/machine.json"], "no such file");
    fails_with(&["run", "matmul:n=64", "--devices", "2", "--topology", "missing.json"], "no such file");
    fails_with(&["run", "matmul:n=8", "--devices", "2", "--repeat", "0"], "number of timed runs is 1 to 10000");
    let huge = u64::MAX.to_string();
    fails_with(&["run", "matmul:n=8", "--devices", "2", "--repeat", &huge], "number of timed runs is 1 to 10000");
    fails_with(&["run", "matmul:n=8", "--devices", "2", "--warmup", &huge], "untimed runs is at most 10000");
    // The unwritable dump directory fails before compiling (the workload would not even plan).
    fails_with(&["run", "matmul:n=1", "--devices", "8", "--dump", file], "--dump: cannot create the directory");
    fails_with(&["run", "matmul:n=2000000", "--devices", "2", "--topology", roomy.to_str().unwrap()], "host memory");
    fails_with(&["check", "matmul:n=8", "--devices", "2", "--max-specs", "0"], "--max-specs must be at least 1");
    fails_with(&["experiment", "proxy", "--small", "--out", file], "--out: cannot create the directory");
    fails_with(&["exprog", "check", empty.to_str().unwrap()], "the program is empty");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn fixed_choices_are_checked_by_the_parser_and_listed() {
    for (args, valid) in [
        (&["plan", "matmul:n=64", "--dtype", "f64"][..], "f32, f16, bf16"),
        (&["plan", "matmul:n=64", "--synthesizer", "greedy"][..], "naive, search"),
        (&["plan", "matmul:n=64", "--cost", "flops"][..], "time, proxy"),
        (&["run", "matmul:n=8", "--backend", "tpu"][..], "cpu, cuda"),
        (&["exprog", "synthesize", "x.exprog", "--topology", "dgx-a100", "--synthesizer", "fast"][..], "naive, search"),
    ] {
        let mut with_json = args.to_vec();
        with_json.push("--json");
        let out = einsummable(&with_json);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
        assert!(v["error"].as_str().unwrap().contains(valid), "{args:?}: {v}");
    }
}

#[test]
fn verbose_logs_go_to_stderr_and_leave_stdout_one_json_object() {
    let out = einsummable(&["plan", "matmul:n=64", "--devices", "4", "-vv", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    assert_eq!(v["optimizer"], "dp");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("chose a spec per operator") && err.contains("placed operator"), "{err}");
    let quiet = einsummable(&["plan", "matmul:n=64", "--devices", "4", "--json"]);
    assert!(quiet.stderr.is_empty(), "{}", String::from_utf8_lossy(&quiet.stderr));
}

/// The keys of a JSON object in the order they were printed (`serde_json::Value` sorts
/// them), so a test can hold a report to its documented struct field by field.
struct Keys(Vec<String>);

impl<'de> serde::Deserialize<'de> for Keys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Keys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Keys, A::Error> {
                let mut keys = Vec::new();
                while let Some((key, _)) = map.next_entry::<String, serde::de::IgnoredAny>()? {
                    keys.push(key);
                }
                Ok(Keys(keys))
            }
        }
        d.deserialize_map(Visitor)
    }
}

/// The top-level keys of the JSON object `out` printed, in order, and the object itself.
fn report(out: &std::process::Output) -> (Vec<String>, serde_json::Value) {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let keys: Keys = serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    (keys.0, serde_json::from_slice(&out.stdout).unwrap())
}

/// `plan --json` prints `PlanReport`'s fields, in declaration order, with their types:
/// renaming, dropping or reordering a field fails here.
#[test]
fn plan_json_has_the_documented_fields_and_types() {
    const PLAN_KEYS: [&str; 21] = [
        "workload",
        "devices",
        "optimizer",
        "cost_model",
        "unit",
        "total_cost",
        "total_bytes",
        "optimize_ms",
        "ops",
        "search",
        "topology",
        "schedule",
        "exchanges",
        "searched_ms",
        "predicted_ms",
        "bytes_moved",
        "compile_ms",
        "compile_error",
        "memory",
        "refinement",
        "rewrites",
    ];
    let (keys, v) = report(&einsummable(&["plan", "matmul:n=64", "--devices", "4", "--json"]));
    assert_eq!(keys, PLAN_KEYS);
    // One matmul is no network to rewrite.
    assert!(v["rewrites"].is_null());
    assert!(v["devices"].is_u64() && v["workload"].is_string() && v["unit"].is_string());
    for key in ["total_cost", "total_bytes", "optimize_ms", "predicted_ms", "compile_ms"] {
        assert!(v[key].is_f64(), "{key}: {}", v[key]);
    }
    assert!(v["bytes_moved"].is_u64() && v["compile_error"].is_null());
    assert_eq!((v["exchanges"].as_str(), &v["searched_ms"]), (Some("naive"), &serde_json::Value::Null));
    let refinement = v["refinement"].as_object().expect("the DP's alternatives were scored");
    let keys: Vec<&str> = refinement.keys().map(String::as_str).collect();
    assert_eq!(keys.len(), 4, "{keys:?}");
    assert!(
        refinement["scored"].is_u64() && refinement["replaced"].is_boolean() && refinement["own_naive_ms"].is_f64()
    );
    let search = v["search"].as_object().expect("the DP reports its search");
    let keys: Vec<&str> = search.keys().map(String::as_str).collect();
    assert_eq!(keys, ["exact", "gap_bound", "largest_table", "method", "order", "width"]);
    assert_eq!((search["method"].as_str(), search["exact"].as_bool()), (Some("variable elimination"), Some(true)));
    assert_eq!(search["order"].as_array().map(Vec::len), Some(1), "one tensor: {search:?}");
    assert!(search["width"].is_u64() && search["largest_table"].is_u64() && search["gap_bound"].is_null());
    let op = &v["ops"][0];
    let op_keys: Vec<&str> = op.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(op_keys, ["cost", "kind", "name", "splits"]);
    assert!(op["splits"].as_object().unwrap().values().all(serde_json::Value::is_u64), "{op}");
    let cost = op["cost"].as_object().unwrap();
    let mut cost_keys: Vec<&str> = cost.keys().map(String::as_str).collect();
    cost_keys.sort_unstable();
    assert_eq!(cost_keys, ["aggregation", "bytes", "compute", "join", "repartition"]);
    assert!(cost.values().all(serde_json::Value::is_f64), "{op}");
    let memory = v["memory"].as_object().unwrap();
    let memory_keys: Vec<&str> = memory.keys().map(String::as_str).collect();
    assert_eq!(memory_keys, ["budget_bytes", "capacity_bytes", "peak_bytes", "resident_bytes"]);
    assert!(memory["capacity_bytes"].is_f64() && memory["budget_bytes"].is_f64());
    assert_eq!(memory["peak_bytes"].as_array().unwrap().len(), 4);
    assert!(memory["resident_bytes"].as_array().unwrap().iter().all(serde_json::Value::is_u64));

    // A plan the topology cannot hold keeps every key, its predictions null.
    let (keys, v) =
        report(&einsummable(&["plan", "matmul:n=64", "--devices", "27", "--topology", "dgx-a100", "--json"]));
    assert_eq!(keys, PLAN_KEYS);
    for key in ["exchanges", "searched_ms", "predicted_ms", "bytes_moved", "compile_ms", "memory"] {
        assert!(v[key].is_null(), "{key}: {}", v[key]);
    }
    assert!(v["compile_error"].is_string());
}

/// `run --json` prints `RunJson`'s fields, in declaration order, with their types.
#[test]
fn run_json_has_the_documented_fields_and_types() {
    const RUN_KEYS: [&str; 16] = [
        "workload",
        "devices",
        "topology",
        "ok",
        "max_rel_error",
        "tolerance",
        "mismatch",
        "wall_ms",
        "device_ms",
        "runs",
        "predicted_ms",
        "bytes_moved",
        "peak_bytes_per_device",
        "resident_bytes_per_device",
        "transient_peak_bytes_per_device",
        "tasks",
    ];
    let (keys, v) = report(&einsummable(&["run", "matmul:n=16", "--devices", "2", "--check", "--json"]));
    assert_eq!(keys, RUN_KEYS);
    assert!(v["ok"].is_boolean() && v["devices"].is_u64() && v["runs"].is_u64() && v["bytes_moved"].is_u64());
    for key in ["max_rel_error", "wall_ms", "predicted_ms"] {
        assert!(v[key].is_f64(), "{key}: {}", v[key]);
    }
    // The CPU backend measures no device time apart from the wall time.
    assert!(v["device_ms"].is_null(), "{}", v["device_ms"]);
    for key in ["peak_bytes_per_device", "resident_bytes_per_device", "transient_peak_bytes_per_device"] {
        let per_device = v[key].as_array().unwrap();
        assert!(per_device.len() == 2 && per_device.iter().all(serde_json::Value::is_u64), "{key}: {}", v[key]);
    }
    let tasks = v["tasks"].as_object().unwrap();
    assert!(tasks.contains_key("kernel") && tasks.values().all(serde_json::Value::is_u64), "{tasks:?}");

    // Without --check, the error is null but present.
    let (keys, v) = report(&einsummable(&["run", "matmul:n=16", "--devices", "2", "--json"]));
    assert_eq!(keys, RUN_KEYS);
    assert!(v["max_rel_error"].is_null() && v["tolerance"].is_null() && v["mismatch"].is_null());
}

/// Runs the binary with OS-string arguments (some not UTF-8).
#[cfg(unix)]
fn einsummable_os(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_einsummable")).args(args).output().expect("the binary runs")
}

/// Non-UTF-8 arguments panicked on clap's error path (with empty stdout under `--json`);
/// paths that are not UTF-8 are paths like any other.
#[cfg(unix)]
#[test]
fn non_utf8_arguments_get_typed_errors() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let bad = OsStr::from_bytes(b"matmul\xff");
    for args in
        [&[OsStr::new("plan"), bad, OsStr::new("--json")][..], &[OsStr::new("--json"), OsStr::new("specs"), bad]]
    {
        let out = einsummable_os(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked") && err.contains("invalid UTF-8"), "{args:?}: {err}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
        assert!(v["error"].as_str().unwrap().contains("invalid UTF-8"), "{v}");
    }
    let dir = std::env::temp_dir().join(format!("einsummable-cli-nonutf8-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(OsStr::from_bytes(b"prog-\xff.exprog"));
    std::fs::write(&file, "IN: A @ 0\nOUT: A @ 1\nA @ 0 -> 1\n").unwrap();
    let out = einsummable_os(&[OsStr::new("exprog"), OsStr::new("check"), file.as_os_str(), OsStr::new("--json")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["file"].as_str().unwrap().ends_with("prog-\u{fffd}.exprog"), "{v}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Input files are read under a size cap and named in every error about them.
#[cfg(unix)]
#[test]
fn exprog_files_are_capped_and_named_in_errors() {
    fails_with(&["exprog", "check", "/dev/zero"], "/dev/zero: larger than the limit of 67108864 bytes");
    fails_with(&["exprog", "simulate", "/dev/zero", "--topology", "dgx-a100"], "larger than the limit");
    let dir = std::env::temp_dir().join(format!("einsummable-cli-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    fails_with(&["exprog", "check", d], &format!("{d}: is a directory, not a file"));
    // A regular file over the cap (sparse: no disk used) is refused from its size, for
    // programs and topology files alike.
    let huge = dir.join("huge.json");
    std::fs::File::create(&huge).unwrap().set_len((64 << 20) + 1).unwrap();
    let h = huge.to_str().unwrap();
    fails_with(&["exprog", "check", h], &format!("{h}: larger than the limit"));
    fails_with(&["plan", "matmul:n=8", "--devices", "2", "--topology", h], &format!("{h}: larger than the limit"));
    let bad = dir.join("bad.exprog");
    std::fs::write(&bad, "IN: A @ 0\nOUT: A @ 1\nA 0 -> 1\n").unwrap();
    let b = bad.to_str().unwrap();
    fails_with(&["exprog", "check", b], &format!("{b}: line 3, column 3: expected '@'"));
    fails_with(&["exprog", "synthesize", b, "--topology", "dgx-a100"], &format!("{b}: line 3"));
    // Validity and simulation errors name the file too.
    std::fs::write(&bad, "IN: A @ 0\nOUT: A @ 1\n").unwrap();
    fails_with(&["exprog", "check", b], &format!("{b}: line 2, column 6: OUT requirement A @ 1 is not met"));
    std::fs::write(&bad, "IN: A @ 0\nOUT: A @ 9\nA @ 0 -> 9\n").unwrap();
    fails_with(&["exprog", "simulate", b, "--topology", "dgx-a100"], &format!("{b}: "));
    std::fs::remove_dir_all(&dir).ok();
}

/// A second `--dump` into the same directory replaces the first dump's files (those its
/// manifest lists) and leaves other files alone.
#[test]
fn a_second_dump_clears_the_first() {
    let dir = std::env::temp_dir().join(format!("einsummable-cli-redump-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("README"), "mine").unwrap();
    let d = dir.to_str().unwrap();
    let dump = |workload: &str| {
        let out = einsummable(&["run", workload, "--devices", "2", "--dump", d]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
        let mut listed: Vec<String> =
            manifest["tensors"].as_array().unwrap().iter().map(|t| t["file"].as_str().unwrap().to_string()).collect();
        listed.extend(["README".to_string(), "manifest.json".to_string()]);
        listed.sort();
        let mut files: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        files.sort();
        assert_eq!(files, listed, "{workload}: the directory holds exactly the manifest's files and README");
        listed
    };
    let first = dump("ffn:tokens=8,d_model=4,d_ff=8");
    let second = dump("matmul:n=8");
    assert!(first.iter().any(|f| !second.contains(f)), "the workloads dump different tensors");
    std::fs::remove_dir_all(&dir).ok();
}

/// `--backend mpi` in a build without the `mpi` feature says how to build and launch it;
/// other commands say that only `run` runs on an MPI job.
#[cfg(not(feature = "mpi"))]
#[test]
fn the_mpi_backend_without_its_feature_says_how_to_get_it() {
    let out = einsummable(&["run", "matmul:n=8", "--backend", "mpi"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--features mpi") && err.contains("mpirun"), "{err}");
    let out = einsummable(&["explain", "matmul:n=8", "--backend", "mpi"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("only `run`"));
}

/// `--backend mpi-cuda` in a build without the `nccl` feature says how to build and launch
/// it; other commands say that only `run` runs on an MPI job.
#[cfg(not(feature = "nccl"))]
#[test]
fn the_gpu_job_backend_without_its_feature_says_how_to_get_it() {
    let out = einsummable(&["run", "matmul:n=8", "--backend", "mpi-cuda"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--features nccl") && err.contains("NCCL") && err.contains("mpirun"), "{err}");
    let out = einsummable(&["explain", "matmul:n=8", "--backend", "mpi-cuda"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("only `run`"));
}
