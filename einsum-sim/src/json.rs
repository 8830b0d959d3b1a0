//! The topology file format: a small JSON object in human units (GB/s, GB, TFLOP/s),
//! documented in the crate docs. The file's shape is a set of `serde` structs (unknown and
//! duplicated fields are errors: they are usually typos); values are checked as they are
//! read, and `serde_path_to_error` names the field of every error (`links[3].gbps`).
//!
//! The checked values (`Scaled`, `Micros`, `SmCount`, `SiteIndex`, `Object`, `SitesFile`)
//! keep their own `Deserialize` visitors rather than `#[serde(try_from = "f64")]` and the
//! like (issue 36): a visitor says what it expected (`expected a number of GB/s in [0.001,
//! 1e7] GB/s`, `expected a site index, got -1`), where `try_from` would say `expected f64` or
//! `expected u64`, and those messages are tested.

use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::error::TopologyError;
use crate::latency::{Latency, US};
use crate::nodes::{Fabric, Nodes};
use crate::plausible::{self, Plausible};
use crate::service::LinkService;
use crate::topology::{ComputeRates, Fallback, GB, Link, MAX_SITES, Site, SiteId, TFLOP, Topology};

type Result<T> = std::result::Result<T, TopologyError>;

mod write;

/// A physical value in the file's unit, held in base units (bytes/s, bytes, FLOP/s): the file
/// value times [`Quantity::SCALE`]. A value outside its [plausible range](crate::plausible)
/// (zero, negative, NaN, or so large it would overflow in base units) is refused where read.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Scaled<Q>(f64, std::marker::PhantomData<Q>);

/// A kind of physical value of the file: its unit's size in base units and its plausible
/// range.
trait Quantity {
    /// Base units per file unit (1e9 bytes in a GB).
    const SCALE: f64;
    /// The range a file value must lie in.
    const RANGE: Plausible;
}

/// GB/s in the file, bytes/s held.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Bandwidth;
/// GB in the file, bytes held.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Capacity;
/// TFLOP/s in the file, FLOP/s held.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Compute;

impl Quantity for Bandwidth {
    const SCALE: f64 = GB;
    const RANGE: Plausible = plausible::BANDWIDTH;
}
impl Quantity for Capacity {
    const SCALE: f64 = GB;
    const RANGE: Plausible = plausible::CAPACITY;
}
impl Quantity for Compute {
    const SCALE: f64 = TFLOP;
    const RANGE: Plausible = plausible::COMPUTE;
}

/// A bandwidth (GB/s in the file).
type Gbps = Scaled<Bandwidth>;
/// A memory capacity (GB in the file).
type Gb = Scaled<Capacity>;
/// A compute rate (TFLOP/s in the file).
type Tera = Scaled<Compute>;

// Every plausible value stays finite in base units.
const _: () = assert!(
    plausible::BANDWIDTH.max * GB < f64::MAX
        && plausible::CAPACITY.max * GB < f64::MAX
        && plausible::COMPUTE.max * TFLOP < f64::MAX
);

impl<'de, Q: Quantity> Deserialize<'de> for Scaled<Q> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct InRange<Q>(std::marker::PhantomData<Q>);
        impl<Q: Quantity> Visitor<'_> for InRange<Q> {
            type Value = Scaled<Q>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a number of {} in {}", Q::RANGE.unit, Q::RANGE)
            }
            fn visit_f64<E: de::Error>(self, x: f64) -> std::result::Result<Self::Value, E> {
                let x = Q::RANGE.check(x).map_err(E::custom)?;
                Ok(Scaled(x * Q::SCALE, std::marker::PhantomData))
            }
            fn visit_i64<E: de::Error>(self, x: i64) -> std::result::Result<Self::Value, E> {
                self.visit_f64(x as f64)
            }
            fn visit_u64<E: de::Error>(self, x: u64) -> std::result::Result<Self::Value, E> {
                self.visit_f64(x as f64)
            }
        }
        deserializer.deserialize_f64(InRange::<Q>(std::marker::PhantomData))
    }
}

/// A latency in µs as written, held in seconds: in its [plausible range](crate::plausible),
/// zero included (the default, meaning no latency).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Micros(f64);

impl<'de> Deserialize<'de> for Micros {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct NonNegative;
        impl Visitor<'_> for NonNegative {
            type Value = Micros;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a number of µs in {}", plausible::LATENCY)
            }
            fn visit_f64<E: de::Error>(self, x: f64) -> std::result::Result<Micros, E> {
                Ok(Micros(plausible::LATENCY.check(x).map_err(E::custom)? * US))
            }
            fn visit_i64<E: de::Error>(self, x: i64) -> std::result::Result<Micros, E> {
                self.visit_f64(x as f64)
            }
            fn visit_u64<E: de::Error>(self, x: u64) -> std::result::Result<Micros, E> {
                self.visit_f64(x as f64)
            }
        }
        deserializer.deserialize_f64(NonNegative)
    }
}

/// `sms`: a positive count of streaming multiprocessors.
#[derive(Clone, Copy, Debug, PartialEq)]
struct SmCount(usize);

impl<'de> Deserialize<'de> for SmCount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct Count;
        impl Visitor<'_> for Count {
            type Value = SmCount;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a positive count of SMs")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> std::result::Result<SmCount, E> {
                match n {
                    0 => Err(E::custom("expected a positive count of SMs, got 0")),
                    // In the range, so it fits a usize.
                    _ => plausible::SM_COUNT.check(n as f64).map(|_| SmCount(n as usize)).map_err(E::custom),
                }
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> std::result::Result<SmCount, E> {
                Err(E::custom(format!("expected a positive count of SMs, got {n}")))
            }
        }
        deserializer.deserialize_u64(Count)
    }
}

/// `latency`: every field optional, zero by default.
#[derive(Deserialize, Default, Clone, Copy)]
#[serde(deny_unknown_fields)]
struct LatencyFile {
    kernel_launch_us: Option<Micros>,
    link_us: Option<Micros>,
    bus_us: Option<Micros>,
    network_us: Option<Micros>,
}

impl LatencyFile {
    fn latency(self) -> Latency {
        let s = |m: Option<Micros>| m.map_or(0.0, |m| m.0);
        Latency {
            kernel_launch: s(self.kernel_launch_us),
            link: s(self.link_us),
            bus: s(self.bus_us),
            network: s(self.network_us),
        }
    }
}

/// A site index as written; its range is checked once the number of sites is known.
#[derive(Clone, Copy, Debug)]
struct SiteIndex(u64);

impl<'de> Deserialize<'de> for SiteIndex {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct Index;
        impl Visitor<'_> for Index {
            type Value = SiteIndex;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a site index (an integer from 0)")
            }
            fn visit_u64<E: de::Error>(self, i: u64) -> std::result::Result<SiteIndex, E> {
                Ok(SiteIndex(i))
            }
            fn visit_i64<E: de::Error>(self, i: i64) -> std::result::Result<SiteIndex, E> {
                u64::try_from(i).map(SiteIndex).map_err(|_| E::custom(format!("expected a site index, got {i}")))
            }
        }
        deserializer.deserialize_u64(Index)
    }
}

/// A `T` read from a JSON object only: derived structs also take an array of their fields in
/// order, which a topology file should not (`"tflops": [1, 2, 3]` hides which is which).
#[derive(Clone, Copy, Default)]
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct Map<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Map<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<Object<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Object)
            }
        }
        deserializer.deserialize_map(Map(std::marker::PhantomData))
    }
}

/// `tflops`: dense peak rates per precision.
#[derive(Deserialize, Clone, Copy)]
#[serde(deny_unknown_fields)]
struct TflopsFile {
    f16: Tera,
    bf16: Tera,
    f32: Tera,
}

/// A site object with every field optional (a field of `sites[i]` overrides `site`).
#[derive(Deserialize, Default, Clone, Copy)]
#[serde(deny_unknown_fields)]
struct SiteFile {
    hbm_gbps: Option<Gbps>,
    hbm_gb: Option<Gb>,
    tflops: Option<Object<TflopsFile>>,
    egress_gbps: Option<Gbps>,
    ingress_gbps: Option<Gbps>,
    nic_gbps: Option<Gbps>,
    sms: Option<SmCount>,
}

/// `sites`: a count of identical sites, or one object per site.
enum SitesFile {
    Count(usize),
    List(Vec<Object<SiteFile>>),
}

impl<'de> Deserialize<'de> for SitesFile {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct Sites;
        impl<'de> Visitor<'de> for Sites {
            type Value = SitesFile;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a site count 1..={MAX_SITES} or an array of site objects")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> std::result::Result<SitesFile, E> {
                match usize::try_from(n) {
                    Ok(n) if (1..=MAX_SITES).contains(&n) => Ok(SitesFile::Count(n)),
                    _ => Err(E::custom(format!("expected {}, got {n}", Expecting(&self)))),
                }
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> std::result::Result<SitesFile, E> {
                Err(E::custom(format!("expected {}, got {n}", Expecting(&self))))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<SitesFile, A::Error> {
                let mut sites = Vec::new();
                while let Some(site) = seq.next_element::<Object<SiteFile>>()? {
                    if sites.len() == MAX_SITES {
                        return Err(de::Error::custom(format!("at most {MAX_SITES} sites are supported")));
                    }
                    sites.push(site);
                }
                Ok(SitesFile::List(sites))
            }
        }
        deserializer.deserialize_any(Sites)
    }
}

/// A visitor's `expecting` text, as a value to format.
struct Expecting<'a, V>(&'a V);

impl<'de, V: Visitor<'de>> fmt::Display for Expecting<'_, V> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.expecting(f)
    }
}

/// A link object.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkFile {
    a: SiteIndex,
    b: SiteIndex,
    gbps: Gbps,
}

/// `{"shared": NAME, "gbps": G}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SharedFile {
    shared: String,
    gbps: Gbps,
}

/// `fallback`: `"switch"` or a shared resource.
struct FallbackFile(Fallback);

impl<'de> Deserialize<'de> for FallbackFile {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct Fb;
        impl<'de> Visitor<'de> for Fb {
            type Value = FallbackFile;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(r#""switch" or {"shared": NAME, "gbps": G}"#)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> std::result::Result<FallbackFile, E> {
                if s == "switch" {
                    Ok(FallbackFile(Fallback::Switch))
                } else {
                    Err(E::custom(format!("expected {}, got {}", Expecting(&self), Value::from(s))))
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<FallbackFile, A::Error> {
                let SharedFile { shared, gbps } = SharedFile::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(FallbackFile(Fallback::Shared { name: shared, bandwidth: gbps.0 }))
            }
        }
        deserializer.deserialize_any(Fb)
    }
}

/// `nodes`: a count of equal nodes of consecutive sites, or each site's node.
enum NodesFile {
    Count(usize),
    List(Vec<SiteIndex>),
}

impl<'de> Deserialize<'de> for NodesFile {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct NodesVisitor;
        impl<'de> Visitor<'de> for NodesVisitor {
            type Value = NodesFile;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a node count 1..={MAX_SITES} or an array of each site's node")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> std::result::Result<NodesFile, E> {
                match usize::try_from(n) {
                    Ok(n) if (1..=MAX_SITES).contains(&n) => Ok(NodesFile::Count(n)),
                    _ => Err(E::custom(format!("expected {}, got {n}", Expecting(&self)))),
                }
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> std::result::Result<NodesFile, E> {
                Err(E::custom(format!("expected {}, got {n}", Expecting(&self))))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<NodesFile, A::Error> {
                let mut nodes = Vec::new();
                while let Some(node) = seq.next_element::<SiteIndex>()? {
                    if nodes.len() == MAX_SITES {
                        return Err(de::Error::custom(format!("at most {MAX_SITES} sites are supported")));
                    }
                    nodes.push(node);
                }
                Ok(NodesFile::List(nodes))
            }
        }
        deserializer.deserialize_any(NodesVisitor)
    }
}

/// `fabric`: `"non-blocking"` or a shared resource.
struct FabricFile(Fabric);

impl<'de> Deserialize<'de> for FabricFile {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct FabricVisitor;
        impl<'de> Visitor<'de> for FabricVisitor {
            type Value = FabricFile;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(r#""non-blocking" or {"shared": NAME, "gbps": G}"#)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> std::result::Result<FabricFile, E> {
                if s == NON_BLOCKING {
                    Ok(FabricFile(Fabric::NonBlocking))
                } else {
                    Err(E::custom(format!("expected {}, got {}", Expecting(&self), Value::from(s))))
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<FabricFile, A::Error> {
                let SharedFile { shared, gbps } = SharedFile::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(FabricFile(Fabric::Shared { name: shared, bandwidth: gbps.0 }))
            }
        }
        deserializer.deserialize_any(FabricVisitor)
    }
}

/// How a file spells [`Fabric::NonBlocking`].
const NON_BLOCKING: &str = "non-blocking";

/// The whole file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TopologyFile {
    name: String,
    sites: SitesFile,
    site: Option<Object<SiteFile>>,
    #[serde(default)]
    links: Vec<Object<LinkFile>>,
    fallback: Option<FallbackFile>,
    nodes: Option<NodesFile>,
    fabric: Option<FabricFile>,
    latency: Option<Object<LatencyFile>>,
    service: Option<ServiceFile>,
}

/// `service`: how the transfers of one ordered pair of sites are served (`service.rs`).
#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum ServiceFile {
    Fair,
    Fifo,
}

impl ServiceFile {
    fn service(self) -> LinkService {
        match self {
            ServiceFile::Fair => LinkService::Fair,
            ServiceFile::Fifo => LinkService::Fifo,
        }
    }
}

/// `own` completed by `default`; a field missing from both is an error at `path`.
fn complete(own: SiteFile, default: SiteFile, path: &str) -> Result<Site> {
    let missing = |key: &str| TopologyError::field(format!("{path}.{key}"), "missing (give it here or in `site`)");
    let giga = |own: Option<Gbps>, default: Option<Gbps>| own.or(default).map(|x| x.0);
    let hbm_bandwidth = giga(own.hbm_gbps, default.hbm_gbps).ok_or_else(|| missing("hbm_gbps"))?;
    let hbm_capacity = own.hbm_gb.or(default.hbm_gb).map(|x| x.0).ok_or_else(|| missing("hbm_gb"))?;
    let Object(tflops) = own.tflops.or(default.tflops).ok_or_else(|| missing("tflops"))?;
    Ok(Site {
        hbm_bandwidth,
        hbm_capacity,
        compute: ComputeRates { f16: tflops.f16.0, bf16: tflops.bf16.0, f32: tflops.f32.0 },
        egress: giga(own.egress_gbps, default.egress_gbps),
        ingress: giga(own.ingress_gbps, default.ingress_gbps),
        nic: giga(own.nic_gbps, default.nic_gbps),
        sms: own.sms.or(default.sms).map(|c| c.0),
    })
}

/// `nodes` and `fabric` for `n` sites: node numbers in range (their gaps and count are
/// [`Topology::with_nodes`]'s to check), a count that splits the sites evenly, and a fabric
/// exactly when there are several nodes.
fn build_nodes(nodes: Option<NodesFile>, fabric: Option<FabricFile>, n: usize) -> Result<Option<Nodes>> {
    let node_of: Vec<usize> = match nodes {
        None if fabric.is_some() => {
            return Err(TopologyError::field("fabric", "given without `nodes` (a fabric joins nodes)"));
        }
        None => return Ok(None),
        Some(NodesFile::Count(count)) => {
            if !n.is_multiple_of(count) {
                return Err(TopologyError::field(
                    "nodes",
                    format!(
                        "{n} sites do not split into {count} equal nodes of consecutive sites (give each site's node \
                         as an array)"
                    ),
                ));
            }
            Nodes::blocks(count, n / count, Fabric::NonBlocking).node_of().to_vec()
        }
        Some(NodesFile::List(list)) => list
            .into_iter()
            .enumerate()
            .map(|(i, node)| match usize::try_from(node.0) {
                Ok(k) if k < n => Ok(k),
                _ => Err(TopologyError::field(
                    format!("nodes[{i}]"),
                    format!("node {} is out of range (the topology has {n} sites, so at most {n} nodes)", node.0),
                )),
            })
            .collect::<Result<_>>()?,
    };
    let several = node_of.iter().any(|&k| k != node_of[0]);
    let fabric = match fabric {
        Some(FabricFile(f)) if several => f,
        None if several => {
            return Err(TopologyError::field("fabric", "missing (required when there are several nodes)"));
        }
        Some(_) => return Err(TopologyError::field("fabric", "the topology has one node: no fabric joins anything")),
        None => Fabric::NonBlocking,
    };
    Ok(Some(Nodes::new(node_of, fabric)))
}

/// The checks the file's shape cannot express: site defaults and index ranges.
fn build(file: TopologyFile) -> Result<Topology> {
    let sites: Vec<Site> = match file.sites {
        SitesFile::List(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, Object(own))| complete(own, file.site.unwrap_or_default().0, &format!("sites[{i}]")))
            .collect::<Result<_>>()?,
        SitesFile::Count(n) => {
            let Some(Object(default)) = file.site else {
                return Err(TopologyError::field("site", "missing (required when `sites` is a count)"));
            };
            vec![complete(default, SiteFile::default(), "site")?; n]
        }
    };
    let n = sites.len();
    let site = |index: SiteIndex, path: String| match usize::try_from(index.0) {
        Ok(i) if i < n => Ok(SiteId(i)),
        _ => Err(TopologyError::field(path, format!("site {} is out of range (the topology has {n} sites)", index.0))),
    };
    let links = file
        .links
        .into_iter()
        .enumerate()
        .map(|(i, Object(l))| {
            Ok(Link {
                a: site(l.a, format!("links[{i}].a"))?,
                b: site(l.b, format!("links[{i}].b"))?,
                bandwidth: l.gbps.0,
            })
        })
        .collect::<Result<_>>()?;
    let nodes = build_nodes(file.nodes, file.fabric, n)?;
    let latency = file.latency.map_or(Latency::ZERO, |Object(l)| l.latency());
    let service = file.service.map_or(LinkService::Fair, ServiceFile::service);
    Ok(Topology::with_nodes(file.name, sites, links, file.fallback.map(|f| f.0), nodes)?
        .with_latency(latency)?
        .with_service(service))
}

/// A data error from `serde_path_to_error` as a [`TopologyError::Field`], said the way the
/// rest of the format's errors are: a missing, unknown or repeated field is named by its
/// own path (`links[0].gbps: missing`), not its object's.
fn field_error(path: &serde_path_to_error::Path, inner: &serde_json::Error) -> TopologyError {
    let mut message = inner.to_string();
    // serde_json appends the position; the path says where, and `Value` input has none.
    let position = format!(" at line {} column {}", inner.line(), inner.column());
    if let Some(stripped) = message.strip_suffix(&position) {
        message = stripped.to_string();
    }
    let parent = match path.to_string().as_str() {
        "." => String::new(),
        p => p.to_string(),
    };
    // The path of an unknown field already ends with it; that of a missing or repeated one
    // is its object's.
    let child = |key: &str| match parent.as_str() {
        "" => key.to_string(),
        p if p == key || p.ends_with(&format!(".{key}")) => p.to_string(),
        p => format!("{p}.{key}"),
    };
    let quoted = |rest: &str| {
        rest.strip_prefix('`').and_then(|r| r.split_once('`')).map(|(k, tail)| (k.to_string(), tail.to_string()))
    };
    if let Some((key, _)) = message.strip_prefix("missing field ").and_then(quoted) {
        return TopologyError::field(child(&key), "missing");
    }
    if let Some((key, _)) = message.strip_prefix("duplicate field ").and_then(quoted) {
        return TopologyError::field(child(&key), "duplicate field (each field may appear once)");
    }
    if let Some((key, tail)) = message.strip_prefix("unknown field ").and_then(quoted) {
        let expected = tail.trim_start_matches(", ").replace('`', "");
        return TopologyError::field(child(&key), format!("unknown field ({expected})"));
    }
    TopologyError::field(if parent.is_empty() { "(top level)".to_string() } else { parent }, message)
}

impl Topology {
    /// Parses the JSON topology format (see the module docs of `json.rs`, repeated in the
    /// crate docs). Errors name the offending field, or the line and column of a syntax
    /// error.
    ///
    /// ```
    /// use einsum_sim::{SiteId, Topology};
    ///
    /// let text = r#"{
    ///   "name": "my-box",
    ///   "sites": 4,
    ///   "site": {"hbm_gbps": 900, "hbm_gb": 32, "tflops": {"f16": 125, "bf16": 15.7, "f32": 15.7}},
    ///   "links": [{"a": 0, "b": 1, "gbps": 50}, {"a": 2, "b": 3, "gbps": 25}],
    ///   "fallback": {"shared": "pcie-bridge", "gbps": 15.75}
    /// }"#;
    /// let t = Topology::from_json_str(text)?;
    /// assert_eq!((t.name(), t.num_sites()), ("my-box", 4));
    /// assert!(t.linked(SiteId(0), SiteId(1)) && !t.linked(SiteId(0), SiteId(2)));
    ///
    /// // A typo is refused, naming the field.
    /// let err = Topology::from_json_str(&text.replace("\"gbps\": 50", "\"gpbs\": 50")).unwrap_err();
    /// assert!(err.to_string().contains("links[0].gpbs"), "{err}");
    /// # Ok::<(), einsum_sim::TopologyError>(())
    /// ```
    pub fn from_json_str(text: &str) -> Result<Topology> {
        let syntax =
            |e: serde_json::Error| TopologyError::Syntax { line: e.line(), column: e.column(), message: e.to_string() };
        let mut json = serde_json::Deserializer::from_str(text);
        let Object(file): Object<TopologyFile> = serde_path_to_error::deserialize(&mut json).map_err(|e| {
            if e.inner().classify() == serde_json::error::Category::Data {
                field_error(e.path(), e.inner())
            } else if e.inner().to_string().starts_with("number out of range") {
                // A number beyond f64 (`1e400`) fails in the tokenizer, but the path is known.
                TopologyError::field(
                    e.path().to_string(),
                    format!(
                        "the number at line {} column {} is out of range (beyond the largest finite number)",
                        e.inner().line(),
                        e.inner().column()
                    ),
                )
            } else {
                syntax(e.into_inner())
            }
        })?;
        json.end().map_err(syntax)?;
        build(file)
    }

    /// The topology a command-line argument names: a preset (`dgx-a100`, ...) or, when
    /// `name` is the path of an existing file, the custom topology it describes. A preset's
    /// name is the preset even where a file of that name exists in the working directory
    /// (`./dgx-a100` names the file), so that a stray file cannot silently change a preset.
    /// A name that is neither a preset nor a readable file fails with the preset list, or,
    /// when it looks like a path (it exists, holds a path separator or ends in `.json`), with
    /// an I/O error saying the file is missing or not a file.
    pub fn named(name: &str) -> Result<Topology> {
        let path = Path::new(name);
        if let Ok(preset) = Topology::preset(name) {
            return Ok(preset);
        }
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
        let text = einsum_core::fsio::read_capped(path, einsum_core::fsio::MAX_INPUT_FILE_BYTES)
            .map_err(|e| TopologyError::Io { path: shown.clone(), message: e.message() })?;
        Topology::from_json_str(&text).map_err(|e| TopologyError::File { path: shown, source: Box::new(e) })
    }
}

#[cfg(test)]
mod tests;
