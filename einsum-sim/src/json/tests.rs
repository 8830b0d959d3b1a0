//! Unit tests of topology files: reading, writing, and every refusal with the
//! path of the field it names, in a file of their own so that `json.rs` holds the format alone.

use super::*;

fn err(text: &str) -> String {
    Topology::from_json_str(text).unwrap_err().to_string()
}

const SITE: &str = r#""site": {"hbm_gbps": 900, "hbm_gb": 32, "tflops": {"f16": 1, "bf16": 1, "f32": 1}}"#;

#[test]
fn parses_the_documented_example() {
    let text = r#"{
          "name": "my-box",
          "sites": 4,
          "site": {"hbm_gbps": 900, "hbm_gb": 32, "tflops": {"f16": 125, "bf16": 15.7, "f32": 15.7}},
          "links": [
            {"a": 0, "b": 1, "gbps": 50},
            {"a": 2, "b": 3, "gbps": 25}
          ],
          "fallback": {"shared": "pcie-bridge", "gbps": 15.75}
        }"#;
    let t = Topology::from_json_str(text).expect("valid");
    assert_eq!(t.num_sites(), 4);
    assert_eq!(t.route_bandwidth(SiteId(3), SiteId(2)), Some(25.0 * GB));
    assert_eq!(t.route_bandwidth(SiteId(0), SiteId(3)), Some(15.75 * GB));
    assert_eq!(Topology::from_json_str(&t.to_json_string()), Ok(t));
}

#[test]
fn errors_name_the_bad_field() {
    let links = |l: &str| err(&format!(r#"{{"name": "x", "sites": 4, {SITE}, "links": {l}, "fallback": "switch"}}"#));
    let three_good = r#"{"a": 0, "b": 1, "gbps": 1}, {"a": 0, "b": 2, "gbps": 1}, {"a": 0, "b": 3, "gbps": 1}"#;
    assert_eq!(
        links(&format!(r#"[{three_good}, {{"a": 1, "b": 2, "gbps": -1}}]"#)),
        "links[3].gbps: -1 GB/s is out of range: a bandwidth must lie in [0.001, 1e7] GB/s"
    );
    assert!(links(r#"[{"a": 0, "b": 9, "gbps": 1}]"#).starts_with("links[0].b: site 9 is out of range"));
    assert!(
        links(r#"[{"a": 0.5, "b": 1, "gbps": 1}]"#)
            .starts_with("links[0].a: invalid type: floating point `0.5`, expected a site index")
    );
    assert!(links(r#"[{"a": 0, "gbps": 1}]"#).starts_with("links[0].b: missing"));
    assert!(links(r#"[{"a": 0, "b": 1, "gpbs": 1}]"#).starts_with("links[0].gpbs: unknown field"));
    assert!(
        links(r#"[{"a": 0, "b": 1, "gbps": "fast"}]"#).starts_with(
            r#"links[0].gbps: invalid type: string "fast", expected a number of GB/s in [0.001, 1e7] GB/s"#
        )
    );
    assert!(links(r#"{}"#).starts_with("links: invalid type: map, expected a sequence"));

    assert!(err(r#"{"sites": 2}"#).starts_with("name: missing"));
    assert!(err(r#"{"name": "x", "sites": 2}"#).starts_with("site: missing"));
    assert!(err(r#"{"name": "x", "sites": 0}"#).starts_with("sites: expected a site count"));
    assert!(err(r#"{"name": "x", "sites": 99999999999}"#).starts_with("sites: expected a site count"));
    let e = err(r#"{"name": "x", "sites": [{"hbm_gbps": 1}]}"#);
    assert!(e.starts_with("sites[0].hbm_gb: missing"), "{e}");
    assert!(
        err(r#"{"name": "x", "sites": 1, "site": {"hbm_gbps": 1, "hbm_gb": 1, "tflops": {"f16": 1, "f32": 1}}}"#)
            .starts_with("site.tflops.bf16: missing")
    );
    assert!(
        err(&format!(r#"{{"name": "x", "sites": [{{}}, {{"hbm_gbps": 0}}], {SITE}}}"#))
            .starts_with("sites[1].hbm_gbps: 0 GB/s is out of range")
    );
    assert!(err(&format!(r#"{{"name": "x", "sites": 2, {SITE}, "fallback": "bus"}}"#)).starts_with("fallback: "));
    assert!(
        err(&format!(r#"{{"name": "x", "sites": 2, {SITE}, "fallback": {{"shared": "b", "gbps": 0}}}}"#))
            .starts_with("fallback.gbps: ")
    );
    assert_eq!(
        err(&format!(r#"{{"name": "x", "sites": 2, {SITE}}}"#)),
        "no route from site 0 to site 1: no link joins them and the topology has no `fallback`"
    );
    assert!(err(r#"{"name": "x", "sitez": 2}"#).starts_with("sitez: unknown field"));
    let e = err("[1, 2]");
    assert!(e.starts_with("(top level): invalid type: sequence, expected an object"), "{e}");
    assert!(err("{\n  \"name\": \"x\",\n  \"sites\": 2,,\n}").starts_with("line 3, column"));
    assert!(
        err(&format!(r#"{{"name": "x", "sites": 2, {SITE}, "fallback": "switch"}} 3"#)).starts_with("line 1, column")
    );
}

#[test]
fn repeated_fields_and_overflowing_numbers_are_named() {
    assert_eq!(err(r#"{"name": "x", "name": "y"}"#), "name: duplicate field (each field may appear once)");
    assert_eq!(
        err(r#"{"name": "x", "sites": 4, "site": {"hbm_gbps": 900, "hbm_gbps": 1}}"#),
        "site.hbm_gbps: duplicate field (each field may appear once)"
    );
    let huge = err(&format!(r#"{{"name": "x", "sites": 2, {SITE}, "links": [{{"a": 0, "b": 1, "gbps": 1e308}}]}}"#));
    assert_eq!(huge, "links[0].gbps: 1e308 GB/s is out of range: a bandwidth must lie in [0.001, 1e7] GB/s");
    assert!(!huge.contains("inf"), "{huge}");
    assert_eq!(
        err(&format!(r#"{{"name": "x", "sites": 2, {SITE}, "fallback": {{"shared": "b", "gbps": 1, "x": 1}}}}"#)),
        "fallback.x: unknown field (expected shared or gbps)"
    );
    assert!(err(r#"{"name": "x", "sites": -2}"#).starts_with("sites: expected a site count"));
    let e = err(&format!(r#"{{"name": "x", "sites": 2, {SITE}, "links": [[0, 1, 5]]}}"#));
    assert!(e.starts_with("links[0]: invalid type: sequence, expected an object"), "{e}");
    assert!(err(r#"{"name": 3}"#).starts_with("name: invalid type: integer `3`, expected a string"));
    assert!(
        err(&format!(r#"{{"name": "x", "sites": 2, {SITE}, "links": [{{"a": -1, "b": 0, "gbps": 1}}]}}"#))
            .starts_with("links[0].a: expected a site index, got -1")
    );
}

/// Every physical field of the format, with a file that sets it to `value` (the other
/// fields plausible).
fn physical_fields(value: &str) -> Vec<(&'static str, String)> {
    let site = |hbm_gbps: &str, hbm_gb: &str, f16: &str, egress: &str| {
        format!(
            r#""site": {{"hbm_gbps": {hbm_gbps}, "hbm_gb": {hbm_gb}, "tflops": {{"f16": {f16}, "bf16": 1, "f32": 1}}, "egress_gbps": {egress}, "nic_gbps": 1}}"#
        )
    };
    let file = |site: String, link: &str, fallback: &str, fabric: &str| {
        format!(
            r#"{{"name": "x", "sites": 4, {site}, "links": [{{"a": 0, "b": 1, "gbps": {link}}}], "fallback": {{"shared": "bus", "gbps": {fallback}}}, "nodes": 2, "fabric": {{"shared": "spine", "gbps": {fabric}}}}}"#
        )
    };
    let v = value;
    vec![
        ("site.hbm_gbps", file(site(v, "1", "1", "1"), "1", "1", "1")),
        ("site.hbm_gb", file(site("1", v, "1", "1"), "1", "1", "1")),
        ("site.tflops.f16", file(site("1", "1", v, "1"), "1", "1", "1")),
        ("site.egress_gbps", file(site("1", "1", "1", v), "1", "1", "1")),
        ("links[0].gbps", file(site("1", "1", "1", "1"), v, "1", "1")),
        ("fallback.gbps", file(site("1", "1", "1", "1"), "1", v, "1")),
        ("fabric.gbps", file(site("1", "1", "1", "1"), "1", "1", v)),
    ]
}

#[test]
fn implausible_values_are_refused_naming_their_field() {
    // The file itself is valid.
    for (_, text) in physical_fields("2") {
        Topology::from_json_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    }
    for value in ["1e-300", "1e308", "0", "-3", "1e400"] {
        for (path, text) in physical_fields(value) {
            let e = err(&text);
            assert!(e.starts_with(&format!("{path}: ")) && e.contains("is out of range"), "{value}: {e}");
            assert!(!e.contains("inf"), "{e}");
        }
    }
    // All values tiny: refused at the first, not predicted in 1.9e295 s.
    let tiny = r#"{"name": "x", "sites": 2, "site": {"hbm_gbps": 1e-300, "hbm_gb": 1e-300, "tflops": {"f16": 1e-300, "bf16": 1e-300, "f32": 1e-300}}, "fallback": {"shared": "b", "gbps": 1e-300}}"#;
    assert_eq!(err(tiny), "site.hbm_gbps: 1e-300 GB/s is out of range: a bandwidth must lie in [0.001, 1e7] GB/s");
    assert_eq!(
        err(&format!(r#"{{"name": "x", "sites": 2, {SITE}, "fallback": {{"shared": "", "gbps": 1}}}}"#)),
        "fallback.shared: expected a non-empty name"
    );
}

#[test]
fn a_repeated_key_is_refused_at_every_level() {
    let site = r#"{"hbm_gbps": 900, "hbm_gb": 32, "tflops": {"f16": 1, "bf16": 1, "f32": 1}}"#;
    let cases = [
        (r#""name": "x", "name": "x", "sites": 2"#.to_string(), "name"),
        (r#""name": "x", "sites": 2, "fallback": "switch""#.to_string(), "fallback"),
        (r#""name": "x", "sites": 2, "site": {"hbm_gbps": 900, "hbm_gbps": 900}"#.to_string(), "site.hbm_gbps"),
        (
            r#""name": "x", "sites": 2, "site": {"tflops": {"f16": 1, "bf16": 1, "bf16": 2}}"#.to_string(),
            "site.tflops.bf16",
        ),
        (format!(r#""name": "x", "sites": [{site}, {{"hbm_gb": 1, "hbm_gb": 2}}]"#), "sites[1].hbm_gb"),
        (format!(r#""name": "x", "sites": 2, "site": {site}, "links": [{{"a": 0, "a": 1}}]"#), "links[0].a"),
        (
            format!(r#""name": "x", "sites": 2, "site": {site}, "fallback": {{"shared": "b", "shared": "c"}}"#),
            "fallback.shared",
        ),
        (
            format!(r#""name": "x", "sites": 2, "site": {site}, "nodes": 2, "fabric": {{"gbps": 1, "gbps": 1}}"#),
            "fabric.gbps",
        ),
    ];
    for (body, path) in cases {
        // The repeated key of the second case is the last one: `fallback` twice.
        let text = if path == "fallback" {
            format!(r#"{{{body}, "site": {site}, "fallback": "switch"}}"#)
        } else {
            format!("{{{body}}}")
        };
        assert_eq!(err(&text), format!("{path}: duplicate field (each field may appear once)"), "{text}");
    }
}

#[test]
fn per_site_overrides_round_trip() {
    let text = format!(
        r#"{{"name": "mixed", "sites": [{{}}, {{"hbm_gb": 80, "egress_gbps": 10}}], {SITE}, "fallback": {{"shared": "bus", "gbps": 3}}}}"#
    );
    let t = Topology::from_json_str(&text).expect("valid");
    assert_eq!(t.sites()[0].hbm_capacity, 32.0 * GB);
    assert_eq!(t.sites()[1].hbm_capacity, 80.0 * GB);
    assert_eq!(t.sites()[1].egress, Some(10.0 * GB));
    let written = t.to_json_string();
    assert!(written.contains("\"sites\": [\n"), "{written}");
    assert_eq!(Topology::from_json_str(&written), Ok(t));
}

#[test]
fn latency_and_sms_round_trip_and_default_to_none() {
    let text = format!(
        r#"{{"name": "lat", "sites": [{{"sms": 80}}, {{}}], {SITE}, "fallback": {{"shared": "bus", "gbps": 3}},
                "latency": {{"kernel_launch_us": 2, "link_us": 0.5, "bus_us": 10, "network_us": 0}}}}"#
    );
    let t = Topology::from_json_str(&text).expect("valid");
    assert_eq!((t.sites()[0].sms, t.sites()[1].sms), (Some(80), None));
    let l = *t.latency();
    assert_eq!((l.kernel_launch, l.link, l.bus, l.network), (2.0 * US, 0.5 * US, 10.0 * US, 0.0));
    let written = t.to_json_string();
    assert!(
        written.contains(r#""latency": {"kernel_launch_us": 2, "link_us": 0.5, "bus_us": 10, "network_us": 0}"#),
        "{written}"
    );
    assert_eq!(Topology::from_json_str(&written), Ok(t));
    // Missing fields are zero; no `latency` at all is the zero latency, and is not written.
    let some = Topology::from_json_str(&text.replace(r#""link_us": 0.5, "#, "")).expect("valid");
    assert_eq!(some.latency().link, 0.0);
    let none = Topology::from_json_str(&format!(
        r#"{{"name": "x", "sites": 2, {SITE}, "fallback": {{"shared": "b", "gbps": 1}}}}"#
    ))
    .expect("valid");
    assert_eq!(*none.latency(), Latency::ZERO);
    assert!(!none.to_json_string().contains("latency"));
}

#[test]
fn the_link_service_round_trips_and_defaults_to_fair() {
    let base = format!(r#""name": "s", "sites": 2, {SITE}, "fallback": {{"shared": "b", "gbps": 1}}"#);
    let fair = Topology::from_json_str(&format!("{{{base}}}")).expect("valid");
    assert_eq!(fair.service(), LinkService::Fair);
    assert!(!fair.to_json_string().contains("service"));
    let fifo = Topology::from_json_str(&format!(r#"{{{base}, "service": "fifo"}}"#)).expect("valid");
    assert_eq!(fifo.service(), LinkService::Fifo);
    let written = fifo.to_json_string();
    assert!(written.contains(r#""service": "fifo""#), "{written}");
    assert_eq!(Topology::from_json_str(&written), Ok(fifo));
    let explicit = Topology::from_json_str(&format!(r#"{{{base}, "service": "fair"}}"#)).expect("valid");
    assert_eq!(explicit, fair);
    let bad = err(&format!(r#"{{{base}, "service": "lifo"}}"#));
    assert!(bad.starts_with("service: unknown variant `lifo`, expected `fair` or `fifo`"), "{bad}");
}

#[test]
fn bad_latencies_and_sm_counts_are_named() {
    let with = |latency: &str| err(&format!(r#"{{"name": "x", "sites": 1, {SITE}, "latency": {latency}}}"#));
    assert_eq!(with(r#"{"link_us": -1}"#), "latency.link_us: -1 µs is out of range: a latency must lie in [0, 1e6] µs");
    assert!(
        with(r#"{"bus_us": "slow"}"#).starts_with("latency.bus_us: invalid type"),
        "{}",
        with(r#"{"bus_us": "slow"}"#)
    );
    assert!(with(r#"{"link_ms": 1}"#).starts_with("latency.link_ms: unknown field"));
    assert!(with("[1, 2]").starts_with("latency: invalid type: sequence, expected an object"));
    let e = err(
        r#"{"name": "x", "sites": 1, "site": {"hbm_gbps": 1, "hbm_gb": 1, "tflops": {"f16": 1, "bf16": 1, "f32": 1}, "sms": 0}}"#,
    );
    assert_eq!(e, "site.sms: expected a positive count of SMs, got 0");
    let e = err(
        r#"{"name": "x", "sites": 1, "site": {"hbm_gbps": 1, "hbm_gb": 1, "tflops": {"f16": 1, "bf16": 1, "f32": 1}, "sms": 18446744073709551615}}"#,
    );
    assert!(e.starts_with("site.sms: 1.8446744073709552e19 SMs is out of range"), "{e}");
    let e = err(
        r#"{"name": "x", "sites": 1, "site": {"hbm_gbps": 1, "hbm_gb": 1, "tflops": {"f16": 1, "bf16": 1, "f32": 1}, "sms": 1.5}}"#,
    );
    assert!(e.starts_with("site.sms: invalid type"), "{e}");
}

#[test]
fn load_errors_name_the_file() {
    let missing = Topology::load("/nonexistent/topology.json").unwrap_err().to_string();
    assert!(missing.starts_with("/nonexistent/topology.json: "), "{missing}");
}
