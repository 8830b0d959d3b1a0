//! The shipped topology files are the presets, and the JSON format round-trips.
//!
//! Regenerate the files with `EINSUM_SIM_BLESS=1 cargo test -p einsum-sim --test topology_files`.

use std::path::PathBuf;

use einsum_sim::{Fallback, GB, PRESETS, SiteId, Topology, TopologyError};

fn file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("topologies").join(format!("{name}.json"))
}

#[test]
fn shipped_files_load_equal_to_the_presets() {
    let bless = std::env::var_os("EINSUM_SIM_BLESS").is_some();
    for name in PRESETS {
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
    for name in PRESETS {
        let preset = Topology::preset(name).expect("preset");
        assert_eq!(Topology::from_json_str(&preset.to_json_string()).as_ref(), Ok(&preset), "{name} (text)");
        let compact = serde_json::to_string(&preset.to_json_value()).expect("serialise");
        assert_eq!(Topology::from_json_str(&compact).as_ref(), Ok(&preset), "{name} (value)");
    }
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
    assert_eq!(source.to_string(), "links[8].gbps: expected a positive number, got -25");
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
