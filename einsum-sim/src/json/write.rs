//! Writing a topology in the file format: `Topology::to_json_value` and
//! `Topology::to_json_string`, in human units, integers where they are, and laid out for people;
//! the inverse of the reading in `json.rs`, kept apart because it shares none of its checks.

use serde_json::{Map, Value};

use super::NON_BLOCKING;
use crate::latency::{Latency, US};
use crate::nodes::{Fabric, Nodes};
use crate::service::LinkService;
use crate::topology::{Fallback, GB, Link, Site, TFLOP, Topology};

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
    if let Some(nic) = site.nic {
        m.insert("nic_gbps".into(), number(nic / GB));
    }
    if let Some(sms) = site.sms {
        m.insert("sms".into(), Value::from(sms));
    }
    Value::Object(m)
}

/// Seconds as the µs a file gives, the shortest decimal that reads back to the same seconds.
fn micros(seconds: f64) -> Value {
    let us = seconds / US;
    let rounded = (us * 1e9).round() / 1e9;
    number(if rounded * US == seconds { rounded } else { us })
}

/// Every latency field, in µs.
fn latency_value(latency: &Latency) -> Value {
    Value::Object(latency.fields().iter().map(|&(k, v)| (k.to_string(), micros(v))).collect())
}

fn link_value(link: &Link) -> Value {
    let mut m = Map::new();
    m.insert("a".into(), Value::from(link.a.0));
    m.insert("b".into(), Value::from(link.b.0));
    m.insert("gbps".into(), number(link.bandwidth / GB));
    Value::Object(m)
}

fn shared_value(name: &str, bandwidth: f64) -> Value {
    let mut m = Map::new();
    m.insert("shared".into(), Value::from(name));
    m.insert("gbps".into(), number(bandwidth / GB));
    Value::Object(m)
}

fn fallback_value(fallback: &Fallback) -> Value {
    match fallback {
        Fallback::Switch => Value::from("switch"),
        Fallback::Shared { name, bandwidth } => shared_value(name, *bandwidth),
    }
}

/// `nodes` as a count where the nodes are equal blocks of consecutive sites, else as each
/// site's node.
fn nodes_value(nodes: &Nodes) -> Value {
    match nodes.block_size() {
        Some(_) => Value::from(nodes.count()),
        None => Value::Array(nodes.node_of().iter().map(|&k| Value::from(k)).collect()),
    }
}

fn fabric_value(fabric: &Fabric) -> Value {
    match fabric {
        Fabric::NonBlocking => Value::from(NON_BLOCKING),
        Fabric::Shared { name, bandwidth } => shared_value(name, *bandwidth),
    }
}

impl Topology {
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
        if let Some(nodes) = self.nodes() {
            m.insert("nodes".into(), nodes_value(nodes));
            m.insert("fabric".into(), fabric_value(nodes.fabric()));
        }
        if *self.latency() != Latency::ZERO {
            m.insert("latency".into(), latency_value(self.latency()));
        }
        if self.service() != LinkService::Fair {
            m.insert("service".into(), Value::from(self.service().name()));
        }
        Value::Object(m)
    }

    /// The topology in the JSON format, laid out for people: one field per line, one site
    /// or link per line. [`Topology::from_json_str`] reads it back equal.
    pub fn to_json_string(&self) -> String {
        let value = self.to_json_value();
        let mut out = String::from("{\n");
        let keys = ["name", "sites", "site", "links", "fallback", "nodes", "fabric", "latency", "service"];
        let present: Vec<_> = keys.iter().filter_map(|k| value.get(k).map(|v| (*k, v))).collect();
        for (i, (key, v)) in present.iter().enumerate() {
            out.push_str(&format!("  \"{key}\": "));
            match v {
                Value::Array(items) if *key != "nodes" => {
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
            let order = [
                "a",
                "b",
                "shared",
                "gbps",
                "hbm_gbps",
                "hbm_gb",
                "tflops",
                "f16",
                "bf16",
                "f32",
                "kernel_launch_us",
                "link_us",
                "bus_us",
                "network_us",
            ];
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
