//! The shipped topology files are the presets, and the JSON format round-trips.
//!
//! Regenerate the files with `EINSUM_SIM_BLESS=1 cargo test -p einsum-sim --test topology_files`.

use std::path::PathBuf;

use einsum_sim::{Fallback, GB, PRESETS, SimGraph, SimTask, SiteId, Topology, TopologyError};

fn file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("topologies").join(format!("{name}.json"))
}

/// The shipped files: every fixed preset, and two nodes of each DGX family as examples of a
/// machine of several nodes.
fn shipped() -> impl Iterator<Item = &'static str> {
    PRESETS.iter().copied().chain(["dgx-a100x2", "dgx-h100x2"])
}

#[test]
fn shipped_files_load_equal_to_the_presets() {
    let bless = std::env::var_os("EINSUM_SIM_BLESS").is_some();
    for name in shipped() {
        let preset = Topology::preset(name).expect("preset");
        if bless {
            std::fs::write(file(name), preset.to_json_string()).expect("write topology file");
        }
        let loaded = Topology::load(file(name)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(loaded, preset, "{name}");
    }
}

#[test]
fn presets_round_trip_through_json() {
    for name in shipped().chain(["dgx-h100x5"]) {
        let preset = Topology::preset(name).expect("preset");
        assert_eq!(Topology::from_json_str(&preset.to_json_string()).as_ref(), Ok(&preset), "{name} (text)");
        let compact = serde_json::to_string(&preset.to_json_value()).expect("serialise");
        assert_eq!(Topology::from_json_str(&compact).as_ref(), Ok(&preset), "{name} (value)");
    }
}

/// The crate docs' two-node file, written by hand: it is the `dgx-h100x2` preset, and a
/// graph with transfers inside and between the nodes simulates identically on both.
#[test]
fn a_hand_written_two_node_file_is_the_preset_and_simulates_identically() {
    let text = r#"{
      "name": "dgx-h100x2",
      "sites": 16,
      "site": {"hbm_gbps": 3350, "hbm_gb": 80, "tflops": {"f16": 989, "bf16": 989, "f32": 67},
               "egress_gbps": 450, "ingress_gbps": 450, "nic_gbps": 50, "sms": 132},
      "fallback": "switch",
      "nodes": 2,
      "fabric": "non-blocking",
      "latency": {"kernel_launch_us": 2, "link_us": 3, "bus_us": 10, "network_us": 5},
      "service": "fifo"
    }"#;
    let from_file = Topology::from_json_str(text).expect("valid");
    let preset = Topology::preset("dgx-h100x2").expect("preset");
    assert_eq!(from_file, preset);
    // The same machine with each site's node listed, and the sites listed one by one.
    let mut value = preset.to_json_value();
    value["nodes"] = serde_json::json!([0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]);
    let site = value["site"].take();
    value["sites"] = serde_json::Value::Array(vec![site; 16]);
    value.as_object_mut().expect("object").remove("site");
    assert_eq!(Topology::from_json_str(&value.to_string()).as_ref(), Ok(&preset));

    let mut g = SimGraph::new();
    let a = g.push(SimTask::transfer("in node 0", SiteId(0), SiteId(5), 2.0 * GB));
    let b = g.push(SimTask::transfer("0 to 1", SiteId(5), SiteId(12), GB).after([a]));
    g.push(SimTask::multicast("1 to both", SiteId(12), vec![SiteId(3), SiteId(9), SiteId(15)], GB).after([b]));
    g.push(SimTask::aggregate("sum", SiteId(12), 2.0 * GB, GB).after([b]));
    let (on_file, on_preset) = (g.simulate(&from_file).expect("simulate"), g.simulate(&preset).expect("simulate"));
    assert_eq!(on_file, on_preset);
    assert!(on_file.completion() > 0.0);
}

/// Node-layout errors in files name the field.
#[test]
fn bad_node_fields_are_named() {
    let err = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut value = Topology::preset("dgx-a100x2").expect("preset").to_json_value();
        edit(&mut value);
        Topology::from_json_str(&value.to_string()).unwrap_err().to_string()
    };
    let e = err(&|v| v["nodes"] = 3.into());
    assert!(e.starts_with("nodes: 16 sites do not split into 3 equal nodes"), "{e}");
    assert!(err(&|v| v["nodes"] = 0.into()).starts_with("nodes: expected a node count"));
    let e = err(&|v| v["nodes"] = serde_json::json!([0, 1, 99]));
    assert!(e.starts_with("nodes[2]: node 99 is out of range"), "{e}");
    let e = err(&|v| v["nodes"] = serde_json::json!([0, 1]));
    assert_eq!(e, "nodes: gives the nodes of 2 sites, but the topology has 16");
    let e = err(&|v| {
        v.as_object_mut().unwrap().remove("fabric");
    });
    assert!(e.starts_with("fabric: missing"), "{e}");
    assert!(err(&|v| v["fabric"] = "fat-tree".into()).starts_with("fabric: expected \"non-blocking\""));
    assert!(err(&|v| v["fabric"] = serde_json::json!({"shared": "spine", "gbps": 0})).starts_with("fabric.gbps: "));
    let e = err(&|v| {
        v["site"].as_object_mut().unwrap().remove("nic_gbps");
    });
    assert!(e.starts_with("sites[0].nic_gbps: missing"), "{e}");
    let e = err(&|v| v["nodes"] = 1.into());
    assert!(e.starts_with("fabric: the topology has one node"), "{e}");
    let e = err(&|v| {
        v.as_object_mut().unwrap().remove("nodes");
    });
    assert!(e.starts_with("fabric: given without `nodes`"), "{e}");
    let e = err(&|v| {
        v.as_object_mut().unwrap().remove("nodes");
        v.as_object_mut().unwrap().remove("fabric");
    });
    assert!(e.starts_with("sites[0].nic_gbps: a NIC carries traffic between nodes"), "{e}");
}

/// A shared fabric and nodes listed site by site (not blocks) write and read back equal.
#[test]
fn listed_nodes_and_a_shared_fabric_round_trip() {
    let text = r#"{"name": "odd", "sites": 3,
      "site": {"hbm_gbps": 100, "hbm_gb": 1, "tflops": {"f16": 1, "bf16": 1, "f32": 1}, "nic_gbps": 4},
      "links": [{"a": 0, "b": 2, "gbps": 9}],
      "nodes": [0, 1, 0], "fabric": {"shared": "spine", "gbps": 6}}"#;
    let t = Topology::from_json_str(text).expect("valid");
    assert_eq!((t.num_nodes(), t.route_bandwidth(SiteId(0), SiteId(1))), (2, Some(4.0 * GB)));
    let names: Vec<_> = t.route(SiteId(1), SiteId(2)).unwrap().iter().map(|r| t.resource(*r).unwrap().name()).collect();
    assert_eq!(names, ["nic-out[1]", "spine", "nic-in[2]"]);
    let written = t.to_json_string();
    assert!(written.contains("\"nodes\": [0, 1, 0]"), "{written}");
    assert_eq!(Topology::from_json_str(&written), Ok(t));
}

#[test]
fn v100_file_has_the_bridge_and_sixteen_links() {
    let t = Topology::load(file("dgx-v100")).expect("load");
    assert_eq!(t.links().len(), 16);
    assert_eq!(t.fallback(), Some(&Fallback::Shared { name: "pcie-bridge".into(), bandwidth: 15.75 * GB }));
    assert!(!t.linked(SiteId(0), SiteId(5)));
    assert_eq!(t.route_bandwidth(SiteId(2), SiteId(3)), Some(50.0 * GB));
}

#[test]
fn bad_files_say_which_file_and_which_field() {
    let dir = std::env::temp_dir().join(format!("einsum-sim-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("bad.json");
    let text = Topology::preset("dgx-v100").expect("preset").to_json_string().replace("\"gbps\": 25", "\"gbps\": -25");
    std::fs::write(&path, text).expect("write");
    let err = Topology::load(&path).unwrap_err();
    let TopologyError::File { source, .. } = &err else { panic!("expected a file error, got {err:?}") };
    assert_eq!(
        source.to_string(),
        "links[8].gbps: -25 GB/s is out of range: a bandwidth must lie in [0.001, 1e7] GB/s"
    );
    assert!(err.to_string().starts_with(&path.display().to_string()));
    std::fs::remove_dir_all(&dir).ok();
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    fn bad_value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::from(-1.0)),
            Just(Value::from(8)),
            Just(Value::from("fast")),
            Just(Value::Null),
            Just(Value::from(1e300)),
            Just(Value::Array(vec![])),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

        #[test]
        fn a_bad_link_field_is_named(link in 0usize..16, field in 0usize..3, bad in bad_value()) {
            let mut value = Topology::preset("dgx-v100").expect("preset").to_json_value();
            let key = ["a", "b", "gbps"][field];
            // 8 is out of range for a site but a fine bandwidth
            let bad = if key == "gbps" && bad == 8 { Value::from(0) } else { bad };
            value["links"][link][key] = bad;
            let err = Topology::from_json_str(&value.to_string()).unwrap_err();
            prop_assert!(
                err.to_string().starts_with(&format!("links[{link}].{key}: ")),
                "{}", err
            );
        }

        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,64}") {
            let _ = Topology::from_json_str(&text);
        }
    }
}

#[test]
fn a_missing_topology_file_says_so_and_an_unknown_name_lists_the_presets() {
    for name in ["/no/such/dir/machine.json", "machine.json", "./machine"] {
        let e = Topology::named(name).unwrap_err();
        assert!(matches!(e, TopologyError::Io { .. }), "{name}: {e:?}");
        assert!(e.to_string().contains("no such file") && e.to_string().contains("dgx-a100"), "{e}");
    }
    let dir = env!("CARGO_MANIFEST_DIR");
    let e = Topology::named(dir).unwrap_err().to_string();
    assert!(e.contains("not a regular file"), "{e}");
    let e = Topology::named("dgx-a200").unwrap_err();
    assert!(matches!(e, TopologyError::UnknownPreset { .. }), "{e:?}");
    assert_eq!(Topology::named("dgx-h100").unwrap(), Topology::preset("dgx-h100").unwrap());
    assert_eq!(Topology::named(file("dgx-v100").to_str().unwrap()).unwrap(), Topology::preset("dgx-v100").unwrap());
}
