//! The topology file format: a small JSON object in human units (GB/s, GB, TFLOP/s),
//! documented in the crate docs. Parsing walks a `serde_json::Value` by hand so that every
//! error can name its field (`links[3].gbps`), and unknown fields are rejected (they are
//! usually typos).

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::TopologyError;
use crate::topology::{ComputeRates, Fallback, GB, Link, MAX_SITES, Site, SiteId, TFLOP, Topology};

type Result<T> = std::result::Result<T, TopologyError>;

/// An object's fields, with the path used in error messages.
struct Fields<'a> {
    path: String,
    map: &'a Map<String, Value>,
}

impl<'a> Fields<'a> {
    /// `value` as an object whose keys are all in `allowed`.
    fn new(value: &'a Value, path: String, allowed: &[&str]) -> Result<Self> {
        let Some(map) = value.as_object() else {
            return Err(TopologyError::field(or_root(&path), format!("expected an object, got {}", kind(value))));
        };
        for key in map.keys() {
            if !allowed.contains(&key.as_str()) {
                return Err(TopologyError::field(
                    join(&path, key),
                    format!("unknown field (expected one of: {})", allowed.join(", ")),
                ));
            }
        }
        Ok(Fields { path, map })
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key)
    }

    fn path(&self, key: &str) -> String {
        join(&self.path, key)
    }

    fn required(&self, key: &str) -> Result<&'a Value> {
        self.get(key).ok_or_else(|| TopologyError::field(self.path(key), "missing"))
    }

    fn positive(&self, key: &str) -> Result<Option<f64>> {
        self.get(key).map(|v| positive(v, &self.path(key))).transpose()
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

fn or_root(path: &str) -> String {
    if path.is_empty() { "(top level)".to_string() } else { path.to_string() }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn positive(value: &Value, path: &str) -> Result<f64> {
    match value.as_f64() {
        Some(x) if x.is_finite() && x > 0.0 => Ok(x),
        Some(x) => Err(TopologyError::field(path, format!("expected a positive number, got {x}"))),
        None => Err(TopologyError::field(path, format!("expected a positive number, got {}", kind(value)))),
    }
}

fn site_index(value: &Value, path: &str, n: usize) -> Result<SiteId> {
    match value.as_u64() {
        Some(i) if i < n as u64 => Ok(SiteId(i as usize)),
        Some(i) => Err(TopologyError::field(path, format!("site {i} is out of range (the topology has {n} sites)"))),
        None => Err(TopologyError::field(path, format!("expected a site index 0..{n}, got {value}"))),
    }
}

const SITE_FIELDS: &[&str] = &["hbm_gbps", "hbm_gb", "tflops", "egress_gbps", "ingress_gbps"];

/// A site object with every field optional, in bytes and FLOP.
#[derive(Default, Clone, Copy)]
struct PartialSite {
    hbm_bandwidth: Option<f64>,
    hbm_capacity: Option<f64>,
    compute: Option<ComputeRates>,
    egress: Option<f64>,
    ingress: Option<f64>,
}

fn parse_site(value: &Value, path: String) -> Result<PartialSite> {
    let f = Fields::new(value, path, SITE_FIELDS)?;
    let compute = match f.get("tflops") {
        None => None,
        Some(v) => {
            let t = Fields::new(v, f.path("tflops"), &["f16", "bf16", "f32"])?;
            let rate = |key: &str| -> Result<f64> { Ok(positive(t.required(key)?, &t.path(key))? * TFLOP) };
            Some(ComputeRates { f16: rate("f16")?, bf16: rate("bf16")?, f32: rate("f32")? })
        }
    };
    Ok(PartialSite {
        hbm_bandwidth: f.positive("hbm_gbps")?.map(|x| x * GB),
        hbm_capacity: f.positive("hbm_gb")?.map(|x| x * GB),
        compute,
        egress: f.positive("egress_gbps")?.map(|x| x * GB),
        ingress: f.positive("ingress_gbps")?.map(|x| x * GB),
    })
}

/// `own` completed by `default`; a field missing from both is an error at `path`.
fn complete(own: PartialSite, default: PartialSite, path: &str) -> Result<Site> {
    let need = |v: Option<f64>, key: &str| {
        v.ok_or_else(|| TopologyError::field(join(path, key), "missing (give it here or in `site`)"))
    };
    Ok(Site {
        hbm_bandwidth: need(own.hbm_bandwidth.or(default.hbm_bandwidth), "hbm_gbps")?,
        hbm_capacity: need(own.hbm_capacity.or(default.hbm_capacity), "hbm_gb")?,
        compute: own
            .compute
            .or(default.compute)
            .ok_or_else(|| TopologyError::field(join(path, "tflops"), "missing (give it here or in `site`)"))?,
        egress: own.egress.or(default.egress),
        ingress: own.ingress.or(default.ingress),
    })
}

fn parse(value: &Value) -> Result<Topology> {
    let top = Fields::new(value, String::new(), &["name", "sites", "site", "links", "fallback"])?;
    let name = match top.required("name")? {
        Value::String(s) => s.clone(),
        other => return Err(TopologyError::field("name", format!("expected a string, got {}", kind(other)))),
    };
    let default = match top.get("site") {
        Some(v) => Some(parse_site(v, "site".to_string())?),
        None => None,
    };
    let sites: Vec<Site> = match top.required("sites")? {
        Value::Array(items) => {
            if items.len() > MAX_SITES {
                return Err(TopologyError::field("sites", format!("at most {MAX_SITES} sites are supported")));
            }
            let mut sites = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let path = format!("sites[{i}]");
                sites.push(complete(parse_site(item, path.clone())?, default.unwrap_or_default(), &path)?);
            }
            sites
        }
        count => {
            let n = match count.as_u64() {
                Some(n) if (1..=MAX_SITES as u64).contains(&n) => n as usize,
                _ => {
                    return Err(TopologyError::field(
                        "sites",
                        format!("expected a site count 1..={MAX_SITES} or an array of site objects, got {count}"),
                    ));
                }
            };
            let Some(default) = default else {
                return Err(TopologyError::field("site", "missing (required when `sites` is a count)"));
            };
            vec![complete(default, PartialSite::default(), "site")?; n]
        }
    };
    let n = sites.len();

    let mut links = Vec::new();
    match top.get("links") {
        None => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let f = Fields::new(item, format!("links[{i}]"), &["a", "b", "gbps"])?;
                let a = site_index(f.required("a")?, &f.path("a"), n)?;
                let b = site_index(f.required("b")?, &f.path("b"), n)?;
                let gbps = positive(f.required("gbps")?, &f.path("gbps"))?;
                links.push(Link { a, b, bandwidth: gbps * GB });
            }
        }
        Some(other) => return Err(TopologyError::field("links", format!("expected an array, got {}", kind(other)))),
    }

    let fallback = match top.get("fallback") {
        None => None,
        Some(Value::String(s)) if s == "switch" => Some(Fallback::Switch),
        Some(v @ Value::Object(_)) => {
            let f = Fields::new(v, "fallback".to_string(), &["shared", "gbps"])?;
            let name = match f.required("shared")? {
                Value::String(s) => s.clone(),
                other => {
                    return Err(TopologyError::field(
                        "fallback.shared",
                        format!("expected a name, got {}", kind(other)),
                    ));
                }
            };
            let gbps = positive(f.required("gbps")?, "fallback.gbps")?;
            Some(Fallback::Shared { name, bandwidth: gbps * GB })
        }
        Some(other) => {
            return Err(TopologyError::field(
                "fallback",
                format!("expected \"switch\" or {{\"shared\": NAME, \"gbps\": G}}, got {other}"),
            ));
        }
    };
    Topology::new(name, sites, links, fallback)
}

/// A number as JSON, an integer where it is one (so files read `450`, not `450.0`).
fn number(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9.0e15 { Value::from(x as i64) } else { Value::from(x) }
}

fn site_value(site: &Site) -> Value {
    let mut m = Map::new();
    m.insert("hbm_gbps".into(), number(site.hbm_bandwidth / GB));
    m.insert("hbm_gb".into(), number(site.hbm_capacity / GB));
    let mut t = Map::new();
    t.insert("f16".into(), number(site.compute.f16 / TFLOP));
    t.insert("bf16".into(), number(site.compute.bf16 / TFLOP));
    t.insert("f32".into(), number(site.compute.f32 / TFLOP));
    m.insert("tflops".into(), Value::Object(t));
    if let Some(e) = site.egress {
        m.insert("egress_gbps".into(), number(e / GB));
    }
    if let Some(i) = site.ingress {
        m.insert("ingress_gbps".into(), number(i / GB));
    }
    Value::Object(m)
}

fn link_value(link: &Link) -> Value {
    let mut m = Map::new();
    m.insert("a".into(), Value::from(link.a.0));
    m.insert("b".into(), Value::from(link.b.0));
    m.insert("gbps".into(), number(link.bandwidth / GB));
    Value::Object(m)
}

fn fallback_value(fallback: &Fallback) -> Value {
    match fallback {
        Fallback::Switch => Value::from("switch"),
        Fallback::Shared { name, bandwidth } => {
            let mut m = Map::new();
            m.insert("shared".into(), Value::from(name.as_str()));
            m.insert("gbps".into(), number(bandwidth / GB));
            Value::Object(m)
        }
    }
}

impl Topology {
    /// Parses the JSON topology format (see the module docs of `json.rs`, repeated in the
    /// crate docs). Errors name the offending field, or the line and column of a syntax
    /// error.
    pub fn from_json_str(text: &str) -> Result<Topology> {
        let value: Value = serde_json::from_str(text).map_err(|e| TopologyError::Syntax {
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        parse(&value)
    }

    /// The topology a command-line argument names: a preset (`dgx-a100`, ...) or, when
    /// `name` is the path of an existing file, the custom topology it describes.
    /// A name that is neither a preset nor a readable file fails with the preset list, or,
    /// when it looks like a path (it exists, holds a path separator or ends in `.json`), with
    /// an I/O error saying the file is missing or not a file.
    pub fn named(name: &str) -> Result<Topology> {
        let path = Path::new(name);
        if path.is_file() {
            return Topology::load(name);
        }
        match Topology::preset(name) {
            Err(TopologyError::UnknownPreset { known, .. })
                if path.exists() || name.contains(['/', '\\']) || name.ends_with(".json") =>
            {
                let what = if path.exists() { "not a regular file" } else { "no such file" };
                Err(TopologyError::Io {
                    path: name.to_string(),
                    message: format!("{what}; a topology is a preset ({known}) or a topology file"),
                })
            }
            result => result,
        }
    }

    /// Reads and parses a topology file; errors start with the file's path.
    pub fn load(path: impl AsRef<Path>) -> Result<Topology> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| TopologyError::Io { path: shown.clone(), message: e.to_string() })?;
        Topology::from_json_str(&text).map_err(|e| TopologyError::File { path: shown, source: Box::new(e) })
    }

    /// The topology in the JSON format, as a value.
    pub fn to_json_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("name".into(), Value::from(self.name()));
        let sites = self.sites();
        if sites.iter().all(|s| s == &sites[0]) {
            m.insert("sites".into(), Value::from(sites.len()));
            m.insert("site".into(), site_value(&sites[0]));
        } else {
            m.insert("sites".into(), Value::Array(sites.iter().map(site_value).collect()));
        }
        if !self.links().is_empty() {
            m.insert("links".into(), Value::Array(self.links().iter().map(link_value).collect()));
        }
        if let Some(f) = self.fallback() {
            m.insert("fallback".into(), fallback_value(f));
        }
        Value::Object(m)
    }

    /// The topology in the JSON format, laid out for people: one field per line, one site
    /// or link per line. [`Topology::from_json_str`] reads it back equal.
    pub fn to_json_string(&self) -> String {
        let value = self.to_json_value();
        let mut out = String::from("{\n");
        let keys = ["name", "sites", "site", "links", "fallback"];
        let present: Vec<_> = keys.iter().filter_map(|k| value.get(k).map(|v| (*k, v))).collect();
        for (i, (key, v)) in present.iter().enumerate() {
            out.push_str(&format!("  \"{key}\": "));
            match v {
                Value::Array(items) => {
                    out.push_str("[\n");
                    for (j, item) in items.iter().enumerate() {
                        let sep = if j + 1 < items.len() { "," } else { "" };
                        out.push_str(&format!("    {}{sep}\n", compact(item)));
                    }
                    out.push_str("  ]");
                }
                other => out.push_str(&compact(other)),
            }
            out.push_str(if i + 1 < present.len() { ",\n" } else { "\n" });
        }
        out.push_str("}\n");
        out
    }
}

/// One-line JSON with a space after each `:` and `,`, keys in the order the format lists.
fn compact(value: &Value) -> String {
    match value {
        Value::Object(m) => {
            let order = ["a", "b", "shared", "gbps", "hbm_gbps", "hbm_gb", "tflops", "f16", "bf16", "f32"];
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort_by_key(|k| order.iter().position(|o| o == k).unwrap_or(order.len()));
            let parts: Vec<String> =
                keys.iter().map(|k| format!("{}: {}", Value::from(k.as_str()), compact(&m[k.as_str()]))).collect();
            format!("{{{}}}", parts.join(", "))
        }
        Value::Array(items) => format!("[{}]", items.iter().map(compact).collect::<Vec<_>>().join(", ")),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
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
        let links =
            |l: &str| err(&format!(r#"{{"name": "x", "sites": 4, {SITE}, "links": {l}, "fallback": "switch"}}"#));
        let three_good = r#"{"a": 0, "b": 1, "gbps": 1}, {"a": 0, "b": 2, "gbps": 1}, {"a": 0, "b": 3, "gbps": 1}"#;
        assert_eq!(
            links(&format!(r#"[{three_good}, {{"a": 1, "b": 2, "gbps": -1}}]"#)),
            "links[3].gbps: expected a positive number, got -1"
        );
        assert!(links(r#"[{"a": 0, "b": 9, "gbps": 1}]"#).starts_with("links[0].b: site 9 is out of range"));
        assert!(links(r#"[{"a": 0.5, "b": 1, "gbps": 1}]"#).starts_with("links[0].a: expected a site index"));
        assert!(links(r#"[{"a": 0, "gbps": 1}]"#).starts_with("links[0].b: missing"));
        assert!(links(r#"[{"a": 0, "b": 1, "gpbs": 1}]"#).starts_with("links[0].gpbs: unknown field"));
        assert!(links(r#"[{"a": 0, "b": 1, "gbps": "fast"}]"#).ends_with("got a string"));
        assert!(links(r#"{}"#).starts_with("links: expected an array"));

        assert!(err(r#"{"sites": 2}"#).starts_with("name: missing"));
        assert!(err(r#"{"name": "x", "sites": 2}"#).starts_with("site: missing"));
        assert!(err(r#"{"name": "x", "sites": 0}"#).starts_with("sites: expected a site count"));
        assert!(err(r#"{"name": "x", "sites": 99999999999}"#).starts_with("sites: expected a site count"));
        assert!(err(r#"{"name": "x", "sites": [{"hbm_gbps": 1}]}"#).starts_with("sites[0].hbm_gb: missing"));
        assert!(
            err(r#"{"name": "x", "sites": 1, "site": {"hbm_gbps": 1, "hbm_gb": 1, "tflops": {"f16": 1, "f32": 1}}}"#)
                .starts_with("site.tflops.bf16: missing")
        );
        assert!(
            err(&format!(r#"{{"name": "x", "sites": [{{}}, {{"hbm_gbps": 0}}], {SITE}}}"#))
                .starts_with("sites[1].hbm_gbps: expected a positive number")
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
        assert!(err("[1, 2]").starts_with("(top level): expected an object"));
        assert!(err("{\n  \"name\": \"x\",\n  \"sites\": 2,,\n}").starts_with("line 3, column"));
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
    fn load_errors_name_the_file() {
        let missing = Topology::load("/nonexistent/topology.json").unwrap_err().to_string();
        assert!(missing.starts_with("/nonexistent/topology.json: "), "{missing}");
    }
}
