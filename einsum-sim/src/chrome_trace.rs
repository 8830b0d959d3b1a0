//! Timelines as Chrome trace JSON, the format Perfetto (<https://ui.perfetto.dev>) and
//! `chrome://tracing` open: what `--trace FILE` on `einsummable plan`, `run` and `explain`
//! writes.
//!
//! A trace file holds one or more [`Process`]es (the simulated run, and on `run` the
//! measured one beside it), each a list of named [`Track`]s of [`Slice`]s:
//! - [`Process::simulated`] turns a simulator [`Trace`] into one track per device (its
//!   kernels, aggregations, copies, loads and stores) and one track per resource of the
//!   topology that carried a flow (a transfer is a slice on every link, egress, ingress or
//!   NIC its flows cross; an aggregation also on its device's HBM);
//! - [`Process::measured`] turns a backend's [`TaskTiming`]s into one track per device.
//!
//! [`chrome_trace`] writes them as a JSON object: `{"traceEvents": [...], "displayTimeUnit":
//! "ms", "otherData": {...}}`, with one complete event (`"ph": "X"`, `ts` and `dur` in µs) per
//! slice and metadata events (`"ph": "M"`) naming every process and track.
//!
//! # Design
//! Slices of one Chrome track must nest, but tasks overlap: the simulator runs the kernels
//! of one device concurrently (sharing its compute) and many flows share a link. So a track
//! whose slices overlap is written over as many Chrome tracks (lanes) as it needs, each
//! without overlaps, the first named as the track and the others `NAME (2)`, `NAME (3)`, ...
//! (the fewest lanes: each slice, by start, goes to a lane free by then). The writer builds
//! a [`serde_json::Value`] and writes no file, so that the caller chooses how the file is
//! written.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use einsum_core::TaskTiming;
use serde_json::{Map, Value, json};

use crate::task::TaskKind;
use crate::topology::{ResourceId, SiteId, Topology};
use crate::trace::Trace;

/// One interval on a track: a task, named by its label.
#[derive(Clone, Debug, PartialEq)]
pub struct Slice {
    /// The slice's name (the task's label, which names its operator and exchange).
    pub name: String,
    /// Its category (`cat`): the task's kind (`kernel`, `transfer`, `aggregate`, ...).
    pub category: String,
    /// When it started, in seconds from the process's origin.
    pub start: f64,
    /// When it ended, in seconds from the process's origin.
    pub end: f64,
    /// What Perfetto shows when the slice is selected (task id, kind, bytes, ...).
    pub args: Map<String, Value>,
}

/// A named timeline of slices, which may overlap (they are written over lanes, see the
/// module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct Track {
    /// The track's name (`device 3`, `link 0->1`, `nic-out[2]`).
    pub name: String,
    /// Its slices, in any order.
    pub slices: Vec<Slice>,
}

/// A named group of tracks: one timeline of a run (`simulated`, `measured`).
#[derive(Clone, Debug, PartialEq)]
pub struct Process {
    /// The process's name.
    pub name: String,
    /// Its tracks, in the order they are shown.
    pub tracks: Vec<Track>,
}

/// The simulator's name of a task kind.
fn sim_kind(kind: &TaskKind) -> &'static str {
    match kind {
        TaskKind::Transfer { .. } => "transfer",
        TaskKind::Multicast { .. } => "multicast",
        TaskKind::Aggregate { .. } => "aggregate",
        TaskKind::Compute { .. } => "compute",
    }
}

/// The name of device (site) `s`'s track.
fn device_name(s: usize) -> String {
    format!("device {s}")
}

impl Process {
    /// The simulated run of `trace`, simulated on `topology`: a track per device that ran a
    /// task (every device of a compiled plan), in site order, then a track per resource of
    /// the topology that a task crossed, in resource order (see the module docs; the
    /// simulator's per-site compute resources are the device tracks). `kinds`, where not
    /// empty, gives each task's category by task index (a task graph's `Task::kind`);
    /// otherwise (or past its end) the simulator's kind is the category. Every slice's
    /// `args` hold the task index (`task`), the simulator's `kind`, and what it moved or
    /// computed (`bytes`, `src`, `dst`, `dsts`, `site`, `seconds` of kernel work at full
    /// rate, the `resources` crossed).
    pub fn simulated(name: &str, trace: &Trace, topology: &Topology, kinds: &[&str]) -> Process {
        let mut devices: BTreeMap<usize, Vec<Slice>> = BTreeMap::new();
        let mut resources: BTreeMap<usize, Vec<Slice>> = BTreeMap::new();
        let real = topology.resources().len();
        for (i, t) in trace.tasks().iter().enumerate() {
            let mut args = Map::new();
            args.insert("task".into(), json!(i));
            args.insert("kind".into(), json!(sim_kind(&t.kind)));
            let crossed: Vec<usize> = t.resources.iter().map(|r| r.0).filter(|&r| r < real).collect();
            let resource_name = |r: usize| topology.resource(ResourceId(r)).map_or_else(String::new, |x| x.name());
            if !crossed.is_empty() {
                args.insert("resources".into(), json!(crossed.iter().map(|&r| resource_name(r)).collect::<Vec<_>>()));
            }
            // The device track it goes on (transfers only where they cross no resource).
            let device = match &t.kind {
                TaskKind::Transfer { src, dst, bytes } => {
                    args.insert("src".into(), json!(src.0));
                    args.insert("dst".into(), json!(dst.0));
                    args.insert("bytes".into(), json!(bytes));
                    crossed.is_empty().then_some(*dst)
                }
                TaskKind::Multicast { src, dsts, bytes } => {
                    args.insert("src".into(), json!(src.0));
                    args.insert("dsts".into(), json!(dsts.iter().map(|d| d.0).collect::<Vec<_>>()));
                    args.insert("bytes".into(), json!(bytes));
                    crossed.is_empty().then_some(*src)
                }
                TaskKind::Aggregate { site, read_bytes, write_bytes } => {
                    args.insert("site".into(), json!(site.0));
                    args.insert("bytes".into(), json!(read_bytes + write_bytes));
                    Some(*site)
                }
                TaskKind::Compute { site, seconds } => {
                    args.insert("site".into(), json!(site.0));
                    args.insert("seconds".into(), json!(seconds));
                    Some(*site)
                }
            };
            let category = kinds.get(i).copied().unwrap_or(sim_kind(&t.kind));
            let slice = Slice { name: t.label.clone(), category: category.into(), start: t.start, end: t.end, args };
            // Resource tracks: a compute task crosses only its site's compute resource.
            for &r in &crossed {
                resources.entry(r).or_default().push(slice.clone());
            }
            if let Some(SiteId(s)) = device {
                devices.entry(s).or_default().push(slice);
            }
        }
        // Every device a transfer reaches is named, even one that ran nothing else.
        for t in trace.tasks() {
            match &t.kind {
                TaskKind::Transfer { src, dst, .. } => {
                    for s in [src, dst] {
                        devices.entry(s.0).or_default();
                    }
                }
                TaskKind::Multicast { src, dsts, .. } => {
                    for s in std::iter::once(src).chain(dsts) {
                        devices.entry(s.0).or_default();
                    }
                }
                TaskKind::Aggregate { .. } | TaskKind::Compute { .. } => {}
            }
        }
        let devices = devices.into_iter().map(|(s, slices)| Track { name: device_name(s), slices });
        let resources = resources.into_iter().map(|(r, slices)| Track {
            name: topology.resource(ResourceId(r)).map_or_else(|| format!("resource {r}"), |x| x.name()),
            slices,
        });
        Process { name: name.into(), tracks: devices.chain(resources).collect() }
    }

    /// The measured run of `timings` (a backend's, see
    /// [`einsum_core::Prepared::record_task_timings`]): a track per device that ran a task,
    /// in device order, each task a slice named by its label, its category its kind, its
    /// `args` the task id (in the graph the backend prepared), kind, device and worker thread.
    pub fn measured(name: &str, timings: &[TaskTiming]) -> Process {
        let mut devices: BTreeMap<u32, Vec<Slice>> = BTreeMap::new();
        for t in timings {
            let args = json!({"task": t.task.0, "kind": t.kind, "device": t.device.0, "worker": t.worker});
            let Value::Object(args) = args else { unreachable!("a JSON object literal") };
            devices.entry(t.device.0).or_default().push(Slice {
                name: t.label.clone(),
                category: t.kind.into(),
                start: t.start,
                end: t.end,
                args,
            });
        }
        let tracks = devices.into_iter().map(|(d, slices)| Track { name: device_name(d as usize), slices }).collect();
        Process { name: name.into(), tracks }
    }
}

/// A time in seconds as µs, the unit of `ts` and `dur`; `None` unless finite and
/// non-negative (a slice with such a time is left out rather than written as `null`).
fn micros(seconds: f64) -> Option<f64> {
    let us = seconds * 1e6;
    // `0.0` for `-0.0`, so that every kept time's bits order as its value.
    (us.is_finite() && us >= 0.0).then_some(if us == 0.0 { 0.0 } else { us })
}

/// The slices of one track as `(ts, dur, slice)` in µs, each with its lane: slices of one
/// lane do not overlap, and there are as few lanes as the deepest overlap. Returns the
/// number of lanes (at least 1).
fn lanes(slices: &[Slice]) -> (Vec<(f64, f64, usize, &Slice)>, usize) {
    let mut timed: Vec<(f64, f64, &Slice)> = slices
        .iter()
        .filter_map(|s| {
            let (ts, end) = (micros(s.start)?, micros(s.end)?);
            Some((ts, end.max(ts), s))
        })
        .collect();
    timed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    // Lanes by the end of their last slice, earliest first (the bits of a non-negative
    // finite f64 order as its value).
    let mut free: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut count = 0;
    let mut out = Vec::with_capacity(timed.len());
    for (ts, end, s) in timed {
        let lane = match free.peek() {
            Some(&Reverse((last, lane))) if f64::from_bits(last) <= ts => {
                free.pop();
                lane
            }
            _ => {
                count += 1;
                count - 1
            }
        };
        free.push(Reverse((end.to_bits(), lane)));
        out.push((ts, end - ts, lane, s));
    }
    (out, count.max(1))
}

/// A metadata event (`"ph": "M"`).
fn metadata(name: &str, pid: usize, tid: usize, args: Value) -> Value {
    json!({"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args})
}

/// The Chrome trace JSON object of `processes` (see the module docs): process `i` is `pid`
/// `i + 1`; every track gets one `tid` per lane, numbered from 1 across the file, each named
/// by a `thread_name` event and ordered by a `thread_sort_index` one, so every track shows
/// (an empty one too). `other` goes under `otherData` (what the trace is of: the workload,
/// the topology, the predicted time). Slices with a time that is not finite and
/// non-negative are left out.
pub fn chrome_trace(processes: &[Process], other: Map<String, Value>) -> Value {
    let mut meta = Vec::new();
    let mut slices = Vec::new();
    let mut tid = 0;
    for (p, process) in processes.iter().enumerate() {
        let pid = p + 1;
        meta.push(metadata("process_name", pid, 0, json!({"name": process.name})));
        meta.push(metadata("process_sort_index", pid, 0, json!({"sort_index": pid})));
        for track in &process.tracks {
            let (placed, count) = lanes(&track.slices);
            let first = tid + 1;
            for lane in 0..count {
                tid += 1;
                let name = if lane == 0 { track.name.clone() } else { format!("{} ({})", track.name, lane + 1) };
                meta.push(metadata("thread_name", pid, tid, json!({"name": name})));
                meta.push(metadata("thread_sort_index", pid, tid, json!({"sort_index": tid})));
            }
            for (ts, dur, lane, s) in placed {
                slices.push(json!({
                    "name": s.name,
                    "cat": s.category,
                    "ph": "X",
                    "ts": ts,
                    "dur": dur,
                    "pid": pid,
                    "tid": first + lane,
                    "args": s.args,
                }));
            }
        }
    }
    meta.extend(slices);
    json!({"traceEvents": meta, "displayTimeUnit": "ms", "otherData": other})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{ComputeRates, Link, Site};
    use crate::trace::TaskTrace;
    use einsum_core::taskgraph::{DeviceId, TaskId};

    /// Two devices joined by a link, each way.
    fn pair() -> Topology {
        let site = Site::new(1000.0, 10.0, ComputeRates::tflops(100.0, 100.0, 10.0));
        Topology::new("pair", vec![site, site], vec![Link::gbps(0, 1, 100.0)], None).unwrap()
    }

    fn task(label: &str, kind: TaskKind, ms: (f64, f64), resources: Vec<ResourceId>) -> TaskTrace {
        TaskTrace { label: label.into(), kind, start: ms.0 * 1e-3, end: ms.1 * 1e-3, resources, deliveries: vec![] }
    }

    /// The events of `trace` by phase, and every `(pid, tid)`'s `thread_name`.
    fn parts(trace: &Value) -> (Vec<&Value>, BTreeMap<(u64, u64), String>) {
        let events = trace["traceEvents"].as_array().unwrap();
        let x: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
        let names = events
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
            .map(|e| {
                let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
                (key, e["args"]["name"].as_str().unwrap().to_string())
            })
            .collect();
        (x, names)
    }

    /// The track (thread name) of the slice named `name`.
    fn track_of<'a>(x: &[&Value], names: &'a BTreeMap<(u64, u64), String>, name: &str) -> Vec<&'a str> {
        let on = |e: &&&Value| e["name"] == name;
        x.iter().filter(on).map(|e| names[&(e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap())].as_str()).collect()
    }

    /// A hand-made trace: two overlapping kernels on device 0 (two lanes), a transfer over
    /// the link, an aggregation on device 1 (also on its HBM), a zero-second marker; then a
    /// measured process beside it.
    #[test]
    fn a_hand_made_trace() {
        let topology = pair();
        let link = topology.find_resource("link 0->1").unwrap();
        let hbm1 = topology.hbm(SiteId(1)).unwrap();
        let compute1 = ResourceId(topology.resources().len() + 1);
        let trace = Trace {
            completion: 3e-3,
            transfer_time: 1e-3,
            tasks: vec![
                task("mm: kernel", TaskKind::Compute { site: SiteId(0), seconds: 1e-3 }, (0.0, 2.0), vec![]),
                task("add: kernel", TaskKind::Compute { site: SiteId(0), seconds: 1e-3 }, (1.0, 3.0), vec![]),
                task(
                    "mm in 0: send",
                    TaskKind::Transfer { src: SiteId(0), dst: SiteId(1), bytes: 1e8 },
                    (0.5, 1.5),
                    vec![link],
                ),
                task(
                    "mm: sum @ 1",
                    TaskKind::Aggregate { site: SiteId(1), read_bytes: 2e8, write_bytes: 1e8 },
                    (1.5, 2.5),
                    vec![hbm1],
                ),
                task("store", TaskKind::Compute { site: SiteId(1), seconds: 0.0 }, (2.5, 2.5), vec![compute1]),
            ],
            usage: vec![],
        };
        let simulated = Process::simulated("simulated", &trace, &topology, &["kernel", "kernel", "transfer"]);
        let names: Vec<&str> = simulated.tracks.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["device 0", "device 1", "hbm[1]", "link 0->1"], "resources in the topology's order");
        let timing = |task: u32, device: u32, worker: usize, start: f64, end: f64| TaskTiming {
            task: TaskId(task),
            label: format!("task {task}"),
            kind: "kernel",
            device: DeviceId(device),
            worker,
            start,
            end,
        };
        let measured = Process::measured(
            "measured",
            &[timing(0, 1, 0, 0.0, 2e-3), timing(1, 0, 1, 1e-3, 4e-3), timing(2, 1, 1, 2e-3, 3e-3)],
        );
        let mut other = Map::new();
        other.insert("predicted_ms".into(), json!(3.0));
        let value = chrome_trace(&[simulated, measured], other);
        // It survives a round trip through text, as a file does.
        let value: Value = serde_json::from_str(&value.to_string()).unwrap();
        assert_eq!(value["displayTimeUnit"], "ms");
        assert_eq!(value["otherData"]["predicted_ms"], 3.0);
        let (x, names) = parts(&value);
        let tracks: Vec<&str> = names.values().map(String::as_str).collect();
        assert_eq!(
            tracks,
            ["device 0", "device 0 (2)", "device 1", "hbm[1]", "link 0->1", "device 0", "device 1"],
            "tids in order"
        );
        let processes: Vec<&Value> = value["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == "process_name")
            .map(|e| &e["args"]["name"])
            .collect();
        assert_eq!(processes, ["simulated", "measured"]);
        assert_eq!(x.len(), 5 + 1 + 3, "five tasks, the aggregation twice, three measured");
        for e in &x {
            let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
            assert!(ts.is_finite() && ts >= 0.0 && dur.is_finite() && dur >= 0.0, "{e}");
        }
        assert_eq!(track_of(&x, &names, "mm: kernel"), ["device 0"]);
        assert_eq!(track_of(&x, &names, "add: kernel"), ["device 0 (2)"], "it overlaps mm");
        assert_eq!(track_of(&x, &names, "mm in 0: send"), ["link 0->1"]);
        assert_eq!(track_of(&x, &names, "mm: sum @ 1"), ["device 1", "hbm[1]"]);
        assert_eq!(track_of(&x, &names, "store"), ["device 1"], "not on the compute resource");
        assert_eq!(track_of(&x, &names, "task 2"), ["device 1"], "after task 0 ended: one lane");
        let send = x.iter().find(|e| e["name"] == "mm in 0: send").unwrap();
        assert_eq!((send["ts"].as_f64().unwrap(), send["dur"].as_f64().unwrap()), (500.0, 1000.0));
        assert_eq!(send["cat"], "transfer");
        assert_eq!(send["args"]["task"], 2);
        assert_eq!(send["args"]["bytes"], 1e8);
        assert_eq!(send["args"]["resources"], json!(["link 0->1"]));
        let sum = x.iter().find(|e| e["name"] == "mm: sum @ 1").unwrap();
        assert_eq!(sum["cat"], "aggregate", "past the kinds given, the simulator's");
        let makespan = |pid: u64| {
            let ends = x.iter().filter(|e| e["pid"] == pid);
            ends.map(|e| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap()).fold(0.0, f64::max)
        };
        assert_eq!(makespan(1), 3000.0);
        assert_eq!(makespan(2), 4000.0);
        assert_eq!(x.iter().find(|e| e["name"] == "task 1").unwrap()["args"]["worker"], 1);
    }

    /// Slices of one lane never overlap, and no more lanes are opened than the deepest
    /// overlap; a non-finite time leaves the slice out.
    #[test]
    fn lanes_never_overlap() {
        let slice =
            |start: f64, end: f64| Slice { name: String::new(), category: String::new(), start, end, args: Map::new() };
        let slices: Vec<Slice> = (0..40)
            .map(|i| {
                let start = f64::from((i * 7) % 13) * 1e-3;
                slice(start, start + f64::from(i % 5) * 1e-3)
            })
            .chain([slice(f64::NAN, 1.0), slice(0.0, f64::INFINITY)])
            .collect();
        let (placed, count) = lanes(&slices);
        assert_eq!(placed.len(), 40);
        for lane in 0..count {
            let mut mine: Vec<(f64, f64)> = placed.iter().filter(|p| p.2 == lane).map(|p| (p.0, p.0 + p.1)).collect();
            mine.sort_by(|a, b| a.0.total_cmp(&b.0));
            assert!(mine.windows(2).all(|w| w[0].1 <= w[1].0), "lane {lane}: {mine:?}");
        }
        // How many slices hold the start of each (itself included, zero-length or not).
        let deepest = (0..placed.len())
            .map(|i| {
                let p = placed[i];
                (0..placed.len()).filter(|&j| j == i || (placed[j].0 <= p.0 && p.0 < placed[j].0 + placed[j].1)).count()
            })
            .max()
            .unwrap();
        assert!(count <= deepest.max(1), "{count} lanes for an overlap of {deepest}");
        assert_eq!(lanes(&[]).1, 1, "an empty track still has its one lane");
    }
}
