//! Invariants of the fluid simulator on random task DAGs.
//!
//! Only invariants that hold under max-min fairness are asserted, on the presets with
//! [`LinkService::Fair`]; the presets' FIFO service keeps the same invariants and serves each
//! ordered pair's transfers one at a time in issue order
//! (`fifo_random_dags_keep_the_invariants_and_serve_each_pair_in_order`). Notably, *adding a task
//! never makes the completion earlier* does **not** hold: slowing one flow can hand its
//! share to another flow on the critical path (a Graham-style anomaly);
//! `adding_a_task_can_make_completion_earlier` shows a concrete case. What does hold:
//!
//! - a task starts exactly when its last dependency ends, and the completion is the last end;
//! - no flow beats its route's bottleneck, so every task lasts at least its standalone time,
//!   and the completion is at least the critical path of standalone times;
//! - max-min is work-conserving in a weighted sense (every active flow has a saturated
//!   bottleneck shared only by flows no faster than it), so the completion is at most the
//!   sum of every flow's standalone time;
//! - no resource carries more than its capacity times its busy time;
//! - times scale linearly with bytes (and kernel seconds), and do not depend on the order tasks are listed in.

use einsum_sim::{
    GB, LinkService, PCIE_BRIDGE, PRESETS, SimGraph, SimTask, SimTaskId, SiteId, TaskKind, Topology, Trace, simulate,
};
use proptest::prelude::*;

const TOL: f64 = 1e-9;

/// The preset `name` without latencies or SM counts, every flow sharing max-min from its
/// start: these are the fluid model's invariants (`tests/latency.rs` covers the latencies).
fn fluid(name: &str) -> Topology {
    Topology::preset(name).expect("preset").fluid().with_service(LinkService::Fair)
}

fn s(i: usize) -> SiteId {
    SiteId(i)
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()) + 1e-15
}

/// One random task: (kind, site a, site b, multicast mask, bytes in GB (0 for empty), deps mask).
type Raw = (u8, usize, usize, u8, f64, u16);

fn raw_task() -> impl Strategy<Value = Raw> {
    let bytes = prop_oneof![1 => Just(0.0), 6 => 0.01f64..2.0];
    (0u8..4, 0usize..8, 0usize..8, any::<u8>(), bytes, any::<u16>())
}

fn build(raw: &[Raw]) -> Vec<SimTask> {
    raw.iter()
        .enumerate()
        .map(|(i, &(kind, a, b, mask, gb, deps))| {
            let bytes = gb * GB;
            let task = match kind {
                0 => SimTask::transfer(format!("t{i}"), s(a), s(if a == b { (a + 1) % 8 } else { b }), bytes),
                1 => {
                    let dsts = (0..8).filter(|&d| d != a && mask & (1 << d) != 0).map(s).collect();
                    SimTask::multicast(format!("m{i}"), s(a), dsts, bytes)
                }
                2 => SimTask::aggregate(format!("g{i}"), s(a), 2.0 * bytes, bytes),
                // a kernel of `gb` ms
                _ => SimTask::compute(format!("k{i}"), s(a), gb * 1e-3),
            };
            task.after((0..i).filter(|&j| deps & (1 << j) != 0).map(SimTaskId))
        })
        .collect()
}

/// Each flow of a task as (bytes, standalone bandwidth).
fn flows(topology: &Topology, task: &SimTask) -> Vec<(f64, f64)> {
    match &task.kind {
        TaskKind::Transfer { src, dst, bytes } => vec![(*bytes, topology.route_bandwidth(*src, *dst).expect("route"))],
        TaskKind::Multicast { src, dsts, bytes } => {
            dsts.iter().map(|d| (*bytes, topology.route_bandwidth(*src, *d).expect("route"))).collect()
        }
        TaskKind::Aggregate { site, read_bytes, write_bytes } => {
            vec![(read_bytes + write_bytes, topology.sites()[site.0].hbm_bandwidth)]
        }
        TaskKind::Compute { seconds, .. } => vec![(*seconds, 1.0)],
    }
}

/// The least time a task can take: its slowest flow alone at its route's bottleneck.
fn standalone(topology: &Topology, task: &SimTask) -> f64 {
    flows(topology, task).iter().map(|(b, bw)| b / bw).fold(0.0, f64::max)
}

fn check_invariants(topology: &Topology, tasks: &[SimTask], trace: &Trace) -> Result<(), TestCaseError> {
    let ends: Vec<f64> = trace.tasks().iter().map(|t| t.end).collect();
    let last = ends.iter().copied().fold(0.0, f64::max);
    prop_assert_eq!(trace.completion(), last);
    let mut critical = vec![0.0f64; tasks.len()];
    for (i, (task, t)) in tasks.iter().zip(trace.tasks()).enumerate() {
        let ready = task.deps.iter().map(|d| ends[d.0]).fold(0.0, f64::max);
        prop_assert_eq!(t.start, ready, "task {} starts when its last dependency ends", i);
        prop_assert!(t.end >= t.start && t.end <= trace.completion());
        let alone = standalone(topology, task);
        prop_assert!(t.duration() >= alone * (1.0 - TOL), "task {} took {} < standalone {}", i, t.duration(), alone);
        critical[i] = task.deps.iter().map(|d| critical[d.0]).fold(0.0, f64::max) + alone;
        for &(_, at) in &t.deliveries {
            prop_assert!(at >= t.start && at <= t.end);
        }
        if !t.deliveries.is_empty() {
            prop_assert_eq!(t.deliveries.iter().map(|d| d.1).fold(0.0, f64::max), t.end);
        }
        if task.kind.is_transfer() {
            prop_assert!(trace.transfer_time() >= t.duration() * (1.0 - TOL));
        }
    }
    let critical_path = critical.iter().copied().fold(0.0, f64::max);
    prop_assert!(trace.completion() >= critical_path * (1.0 - TOL));
    let serial: f64 = tasks.iter().flat_map(|t| flows(topology, t)).map(|(b, bw)| b / bw).sum();
    prop_assert!(trace.completion() <= serial * (1.0 + TOL), "{} > serial {}", trace.completion(), serial);
    prop_assert!(trace.transfer_time() <= trace.completion() * (1.0 + TOL));

    // per resource: bytes add up, and never exceed capacity × busy time
    // (compute resources follow the topology's, one per site)
    let mut expected_bytes = vec![0.0; topology.resources().len() + topology.num_sites()];
    for task in tasks {
        let routes: Vec<(f64, Vec<usize>)> = match &task.kind {
            TaskKind::Transfer { src, dst, bytes } => {
                vec![(*bytes, topology.route(*src, *dst).expect("route").iter().map(|r| r.0).collect())]
            }
            TaskKind::Multicast { src, dsts, bytes } => dsts
                .iter()
                .map(|d| (*bytes, topology.route(*src, *d).expect("route").iter().map(|r| r.0).collect()))
                .collect(),
            TaskKind::Aggregate { site, read_bytes, write_bytes } => {
                vec![(read_bytes + write_bytes, vec![topology.hbm(*site).expect("hbm").0])]
            }
            TaskKind::Compute { site, seconds } => vec![(*seconds, vec![topology.resources().len() + site.0])],
        };
        for (bytes, route) in routes {
            for r in route {
                expected_bytes[r] += bytes;
            }
        }
    }
    prop_assert_eq!(trace.resource_usage().len(), expected_bytes.len());
    for (u, expected) in trace.resource_usage().iter().zip(expected_bytes) {
        prop_assert!(close(u.bytes, expected, 1e-12), "{} carried {} bytes, expected {}", u.name, u.bytes, expected);
        prop_assert!(u.bytes <= u.capacity * u.busy_time * (1.0 + TOL) + 1.0, "{} over capacity", u.name);
        prop_assert!(u.busy_time <= trace.completion() * (1.0 + TOL));
        prop_assert!(trace.completion() >= u.bytes / u.capacity * (1.0 - TOL));
    }
    Ok(())
}

/// The transfers of one ordered pair are served one at a time in issue order: of two
/// transfers on one pair, the one that ends later ends at least its own bytes at its route's
/// bottleneck after the other (it never shared the pair), and was not issued earlier
/// (fluid topology: a task is issued when its last dependency ends).
fn check_fifo(topology: &Topology, tasks: &[SimTask], trace: &Trace) -> Result<(), TestCaseError> {
    let transfers: Vec<(usize, (SiteId, SiteId), f64)> = tasks
        .iter()
        .enumerate()
        .filter_map(|(i, t)| match t.kind {
            TaskKind::Transfer { src, dst, bytes } if bytes > 0.0 => Some((i, (src, dst), bytes)),
            _ => None,
        })
        .collect();
    for &(i, pair, _) in &transfers {
        for &(j, other, bytes) in &transfers {
            let (ti, tj) = (&trace.tasks()[i], &trace.tasks()[j]);
            if i == j || pair != other || tj.end < ti.end || (tj.end == ti.end && j < i) {
                continue;
            }
            let alone = bytes / topology.route_bandwidth(pair.0, pair.1).expect("route");
            prop_assert!(
                tj.end >= (ti.end + alone) * (1.0 - TOL),
                "transfer {} on {:?} ends at {}, under {} + {} after transfer {}",
                j,
                pair,
                tj.end,
                ti.end,
                alone,
                i
            );
            prop_assert!(tj.start >= ti.start, "transfer {} issued before {} ended after it", j, i);
        }
    }
    Ok(())
}

fn scaled(tasks: &[SimTask], k: f64) -> Vec<SimTask> {
    tasks
        .iter()
        .cloned()
        .map(|mut t| {
            t.kind = match t.kind {
                TaskKind::Transfer { src, dst, bytes } => TaskKind::Transfer { src, dst, bytes: bytes * k },
                TaskKind::Multicast { src, dsts, bytes } => TaskKind::Multicast { src, dsts, bytes: bytes * k },
                TaskKind::Aggregate { site, read_bytes, write_bytes } => {
                    TaskKind::Aggregate { site, read_bytes: read_bytes * k, write_bytes: write_bytes * k }
                }
                TaskKind::Compute { site, seconds } => TaskKind::Compute { site, seconds: seconds * k },
            };
            t
        })
        .collect()
}

fn reversed(tasks: &[SimTask]) -> Vec<SimTask> {
    let n = tasks.len();
    tasks
        .iter()
        .rev()
        .cloned()
        .map(|mut t| {
            t.deps = t.deps.iter().map(|d| SimTaskId(n - 1 - d.0)).collect();
            t
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn fifo_random_dags_keep_the_invariants_and_serve_each_pair_in_order(
        preset in 0usize..3, raw in prop::collection::vec(raw_task(), 1..12), sites in 2usize..5,
    ) {
        let topology = fluid(PRESETS[preset]).with_service(LinkService::Fifo);
        // few sites, so that transfers share pairs
        let raw: Vec<Raw> = raw.into_iter().map(|mut r| { r.1 %= sites; r.2 %= sites; r }).collect();
        let tasks = build(&raw);
        let trace = simulate(&topology, &tasks).expect("a DAG with valid sites simulates");
        check_invariants(&topology, &tasks, &trace)?;
        check_fifo(&topology, &tasks, &trace)?;
    }

    #[test]
    fn random_dags_keep_the_invariants(preset in 0usize..3, raw in prop::collection::vec(raw_task(), 1..12)) {
        let topology = fluid(PRESETS[preset]);
        let tasks = build(&raw);
        let trace = simulate(&topology, &tasks).expect("a DAG with valid sites simulates");
        check_invariants(&topology, &tasks, &trace)?;
    }

    /// With the presets' latencies, every task still starts when its last dependency ends
    /// and lasts at least its latency plus its standalone time (the latency is a delay
    /// before its flows, which then run no faster than alone).
    #[test]
    fn with_latencies_every_task_waits_its_latency_then_flows(
        preset in 0usize..3, raw in prop::collection::vec(raw_task(), 1..12),
    ) {
        let topology = Topology::preset(PRESETS[preset]).expect("preset");
        let tasks = build(&raw);
        let trace = simulate(&topology, &tasks).expect("simulate");
        for (i, (task, t)) in tasks.iter().zip(trace.tasks()).enumerate() {
            let ready = task.deps.iter().map(|d| trace.tasks()[d.0].end).fold(0.0, f64::max);
            prop_assert!(close(t.start, ready, 1e-12), "task {}: starts at {} not {}", i, t.start, ready);
            let least = topology.task_latency(&task.kind) + standalone(&topology, task);
            prop_assert!(t.end - t.start >= least * (1.0 - 1e-9), "task {}: {} < {}", i, t.end - t.start, least);
        }
    }

    #[test]
    fn times_scale_with_bytes_and_ignore_task_order(
        preset in 0usize..3,
        raw in prop::collection::vec(raw_task(), 1..10),
        k in prop_oneof![Just(0.5), Just(2.0), Just(3.0)],
    ) {
        let topology = fluid(PRESETS[preset]);
        let tasks = build(&raw);
        let trace = simulate(&topology, &tasks).expect("simulate");
        let bigger = simulate(&topology, &scaled(&tasks, k)).expect("simulate");
        prop_assert!(close(bigger.completion(), k * trace.completion(), 1e-9));
        let back = simulate(&topology, &reversed(&tasks)).expect("simulate");
        let n = tasks.len();
        for (i, t) in trace.tasks().iter().enumerate() {
            let r = &back.tasks()[n - 1 - i];
            prop_assert!(close(t.start, r.start, 1e-7) && close(t.end, r.end, 1e-7), "task {}", i);
        }
        prop_assert!(close(back.completion(), trace.completion(), 1e-7));
    }

    #[test]
    fn a_lone_transfer_runs_at_its_route_bottleneck(
        preset in 0usize..3, src in 0usize..8, hop in 1usize..8, gb in 0.001f64..10.0,
    ) {
        let topology = fluid(PRESETS[preset]);
        let dst = (src + hop) % 8;
        let trace = simulate(&topology, &[SimTask::transfer("x", s(src), s(dst), gb * GB)]).expect("simulate");
        let bottleneck = topology.route_bandwidth(s(src), s(dst)).expect("route");
        prop_assert_eq!(trace.completion(), gb * GB / bottleneck);
        prop_assert_eq!(trace.transfer_time(), trace.completion());
    }

    #[test]
    fn equal_flows_on_one_bottleneck_finish_together(n in 1usize..8, gb in 0.01f64..4.0, switched in 0usize..2) {
        let bytes = gb * GB;
        // NVSwitch: n transfers out of site 0 share its egress.
        let topology = fluid(["dgx-a100", "dgx-h100"][switched]);
        let cap = topology.sites()[0].egress.expect("egress cap");
        let tasks: Vec<SimTask> = (1..=n).map(|d| SimTask::transfer(format!("0->{d}"), s(0), s(d), bytes)).collect();
        let trace = simulate(&topology, &tasks).expect("simulate");
        for t in trace.tasks() {
            prop_assert!(close(t.end, n as f64 * bytes / cap, 1e-12));
        }
        // ... and a multicast to the same n sites is the same n flows.
        let multicast = SimTask::multicast("0->*", s(0), (1..=n).map(s).collect(), bytes);
        let trace = simulate(&topology, &[multicast]).expect("simulate");
        prop_assert!(close(trace.completion(), n as f64 * bytes / cap, 1e-12));
        // V100: n transfers between unlinked pairs share the PCIe bridge.
        let v100 = fluid("dgx-v100");
        let unlinked: Vec<(usize, usize)> = (0..8)
            .flat_map(|a| (0..8).map(move |b| (a, b)))
            .filter(|&(a, b)| a != b && !v100.linked(s(a), s(b)))
            .take(n)
            .collect();
        let tasks: Vec<SimTask> = unlinked.iter().map(|&(a, b)| SimTask::transfer("bridged", s(a), s(b), bytes)).collect();
        let trace = simulate(&v100, &tasks).expect("simulate");
        for t in trace.tasks() {
            prop_assert!(close(t.end, n as f64 * bytes / (15.75 * GB), 1e-12));
        }
        prop_assert!(close(trace.bytes_through(PCIE_BRIDGE), n as f64 * bytes, 1e-12));
        // n aggregations at one site share its HBM.
        let tasks: Vec<SimTask> = (0..n).map(|_| SimTask::aggregate("agg", s(3), 2.0 * bytes, bytes)).collect();
        let trace = simulate(&v100, &tasks).expect("simulate");
        for t in trace.tasks() {
            prop_assert!(close(t.end, n as f64 * 3.0 * bytes / (900.0 * GB), 1e-12));
        }
    }

    #[test]
    fn a_task_on_resources_nobody_else_uses_changes_nothing(
        preset in 0usize..3, raw in prop::collection::vec(raw_task(), 1..10), gb in 0.01f64..2.0,
    ) {
        let topology = fluid(PRESETS[preset]);
        // keep every random task off site 7's HBM, then add an aggregation there
        let raw: Vec<Raw> = raw.into_iter().map(|mut r| { if r.0 == 2 { r.1 %= 7; } r }).collect();
        let tasks = build(&raw);
        let before = simulate(&topology, &tasks).expect("simulate");
        let mut more = tasks.clone();
        more.push(SimTask::aggregate("extra", s(7), 2.0 * gb * GB, gb * GB));
        let after = simulate(&topology, &more).expect("simulate");
        for (a, b) in before.tasks().iter().zip(after.tasks()) {
            prop_assert!(close(a.start, b.start, 1e-9) && close(a.end, b.end, 1e-9));
        }
        prop_assert!(after.completion() >= before.completion() * (1.0 - 1e-9));
    }
}

/// Max-min fairness is not monotone: adding a task that nothing depends on can make the
/// whole graph finish earlier. On a DGX-H100, `a` (0→1) and `b` (5→1) split ingress[1].
/// A small multicast out of site 0 throttles `a` at egress[0], so `b` takes the rest of
/// ingress[1], finishes sooner, and the long transfer after it (the critical path) starts
/// sooner. `a` ends later, but it had slack.
#[test]
fn adding_a_task_can_make_completion_earlier() {
    let h100 = fluid("dgx-h100");
    let mut g = SimGraph::new();
    g.push(SimTask::transfer("a", s(0), s(1), GB));
    let b = g.push(SimTask::transfer("b", s(5), s(1), GB));
    g.push(SimTask::transfer("long", s(6), s(7), 10.0 * GB).after([b]));
    let without = g.simulate(&h100).expect("simulate");
    g.push(SimTask::multicast("x", s(0), vec![s(2), s(3), s(4)], 0.25 * GB));
    let with = g.simulate(&h100).expect("simulate");
    let unit = GB / (450.0 * GB);
    assert!(close(without.completion(), 12.0 * unit, 1e-12), "{without}");
    assert!(close(with.completion(), 11.5 * unit, 1e-12), "{with}");
    assert!(with.completion() < without.completion());
}
