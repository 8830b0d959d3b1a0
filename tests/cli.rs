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
