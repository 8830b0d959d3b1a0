//! Unit tests of the event-driven simulation (fair and FIFO service, latency,
//! multicasts, the three recorders agreeing), in a file of their own so that `simulate.rs`
//! holds the event loop alone.

use super::*;
use crate::topology::GB;

/// The DGX-H100 without latencies: the fluid model's exact figures.
fn h100() -> Topology {
    Topology::preset("dgx-h100").expect("preset").fluid()
}

fn s(i: usize) -> SiteId {
    SiteId(i)
}

#[test]
fn empty_graph_completes_at_zero() {
    let trace = simulate(&h100(), &[]).expect("simulate");
    assert_eq!((trace.completion(), trace.transfer_time()), (0.0, 0.0));
    assert!(trace.resource_usage().iter().all(|u| u.bytes == 0.0 && u.busy_time == 0.0));
}

#[test]
fn zero_byte_tasks_finish_at_once_and_release_dependents() {
    let tasks = vec![
        SimTask::transfer("t", s(0), s(1), GB),
        SimTask::transfer("empty", s(1), s(2), 0.0).after([SimTaskId(0)]),
        SimTask::multicast("nobody", s(2), vec![], GB).after([SimTaskId(1)]),
        SimTask::aggregate("noop", s(2), 0.0, 0.0).after([SimTaskId(2)]),
        SimTask::transfer("last", s(2), s(3), GB).after([SimTaskId(3)]),
    ];
    let trace = simulate(&h100(), &tasks).expect("simulate");
    let one = GB / (450.0 * GB);
    for i in 1..4 {
        assert_eq!((trace.tasks()[i].start, trace.tasks()[i].end), (one, one), "task {i}");
    }
    assert_eq!(trace.tasks()[1].deliveries, [(s(2), one)]);
    assert_eq!(trace.completion(), 2.0 * one);
    assert_eq!(trace.transfer_time(), 2.0 * one);
}

#[test]
fn concurrent_aggregations_share_hbm() {
    let tasks = vec![
        SimTask::aggregate("x", s(0), 2.0 * GB, GB),
        SimTask::aggregate("y", s(0), 2.0 * GB, GB),
        SimTask::aggregate("z", s(1), 2.0 * GB, GB),
    ];
    let trace = simulate(&h100(), &tasks).expect("simulate");
    let alone = 3.0 * GB / (3350.0 * GB);
    assert_eq!(trace.tasks()[0].end, 2.0 * alone);
    assert_eq!(trace.tasks()[1].end, 2.0 * alone);
    assert_eq!(trace.tasks()[2].end, alone);
    assert_eq!(trace.transfer_time(), 0.0);
    assert_eq!(trace.bytes_through("hbm[0]"), 6.0 * GB);
    let hbm0 = h100().hbm(s(0)).expect("hbm");
    assert_eq!(trace.usage(hbm0).map(|u| u.busy_time), Some(2.0 * alone));
}

#[test]
fn kernels_share_their_site_and_overlap_across_sites() {
    let t = h100();
    let tasks = vec![
        SimTask::compute("a", s(0), 0.002),
        SimTask::compute("b", s(0), 0.001),
        SimTask::compute("c", s(1), 0.003),
        SimTask::transfer("t", s(0), s(1), 0.45 * GB).after([SimTaskId(0)]),
        SimTask::compute("d", s(1), 0.001).after([SimTaskId(2), SimTaskId(3)]),
    ];
    let trace = simulate(&t, &tasks).expect("simulate");
    // a and b share compute[0] at half rate each until b ends at 2 ms, then a runs alone
    assert_eq!(trace.tasks()[1].end, 0.002);
    assert_eq!(trace.tasks()[0].end, 0.003);
    assert_eq!(trace.tasks()[2].end, 0.003);
    // the transfer (1 ms at 450 GB/s) does not compete with kernels
    assert!((trace.tasks()[3].end - 0.004).abs() < 1e-15);
    assert!((trace.completion() - 0.005).abs() < 1e-15);
    let n = t.resources().len();
    let compute0 = &trace.resource_usage()[n];
    assert_eq!((compute0.name.as_str(), compute0.capacity, compute0.bytes), ("compute[0]", 1.0, 0.003));
    assert_eq!(trace.bytes_through("compute[1]"), 0.004);
    assert_eq!(trace.tasks()[0].resources, [ResourceId(n)]);
    assert!(trace.to_string().contains("compute[1]"));
    assert!(matches!(
        simulate(&t, &[SimTask::compute("bad", s(0), f64::INFINITY)]),
        Err(SimError::InvalidBytes { field: "seconds", .. })
    ));
    assert!(matches!(simulate(&t, &[SimTask::compute("far", s(8), 1.0)]), Err(SimError::UnknownSite { .. })));
}

/// `simulate_completion` and `simulate_end_times` run the event loop of `simulate` and
/// must give its completion and every task's end bit for bit, here with latencies (tasks
/// waiting before their flows), shared links, multicasts and zero-byte tasks, on three
/// machines; and fail alike.
#[test]
fn the_completion_alone_is_the_traced_completion_bit_for_bit() {
    let mut tasks = vec![
        SimTask::compute("k0", s(0), 1.3e-4),
        SimTask::compute("k1", s(1), 0.7e-4),
        SimTask::multicast("m", s(0), vec![s(1), s(2), s(3)], 0.3 * GB).after([SimTaskId(0)]),
        SimTask::transfer("empty", s(2), s(1), 0.0).after([SimTaskId(1)]),
    ];
    for i in 0..12 {
        let dep = SimTaskId(tasks.len() - 1 - i % 3);
        tasks.push(SimTask::transfer("t", s(i % 4), s((i + 1 + i / 4) % 4), (1 + i) as f64 * 0.01 * GB).after([dep]));
        tasks.push(SimTask::aggregate("a", s(i % 4), 1e8, 5e7).after([SimTaskId(tasks.len() - 1)]));
    }
    for name in ["dgx-h100", "dgx-v100", "dgx-a100x2"] {
        let t = Topology::preset(name).expect("preset");
        assert!(t.latency().kernel_launch > 0.0, "{name}");
        let trace = simulate(&t, &tasks).expect("simulate");
        let traced = trace.completion();
        assert!(traced > 0.0);
        assert_eq!(simulate_completion(&t, &tasks).expect("completion").to_bits(), traced.to_bits(), "{name}");
        let ends: Vec<u64> = trace.tasks().iter().map(|task| task.end.to_bits()).collect();
        let alone: Vec<u64> = simulate_end_times(&t, &tasks).expect("ends").iter().map(|e| e.to_bits()).collect();
        assert_eq!(alone, ends, "{name}");
        assert!(ends.iter().collect::<std::collections::BTreeSet<_>>().len() > tasks.len() / 2, "{name}");
    }
    let bad = vec![SimTask::transfer("x", s(0), s(1), GB).after([SimTaskId(0)])];
    assert_eq!(simulate_completion(&h100(), &bad).unwrap_err(), simulate(&h100(), &bad).unwrap_err());
    assert_eq!(simulate_end_times(&h100(), &bad).unwrap_err(), simulate(&h100(), &bad).unwrap_err());
    assert_eq!(simulate_completion(&h100(), &[]).unwrap(), 0.0);
}

/// One workspace reused across graphs and machines of different sizes gives every run's
/// end times bit for bit as a fresh one does.
#[test]
fn a_reused_workspace_changes_no_end_time() {
    let graph = |n: usize, sites: usize| -> Vec<SimTask> {
        let mut tasks = vec![SimTask::compute("k", s(0), 1e-4)];
        for i in 0..n {
            let dep = SimTaskId(tasks.len() - 1 - (i % 2).min(tasks.len() - 1));
            let (a, b) = (i % sites, (i * 3 + 1) % sites);
            let b = if a == b { (b + 1) % sites } else { b };
            tasks.push(SimTask::transfer("t", s(a), s(b), (1 + i % 5) as f64 * 0.01 * GB).after([dep]));
            tasks.push(SimTask::aggregate("a", s(b), 1e8, 5e7).after([SimTaskId(tasks.len() - 1)]));
        }
        tasks
    };
    let mut workspace = Workspace::default();
    for (name, n) in [("dgx-h100", 40), ("dgx-v100", 12), ("dgx-a100x2", 60), ("dgx-h100", 7)] {
        let t = Topology::preset(name).expect("preset");
        let tasks = graph(n, t.num_sites());
        let fresh: Vec<u64> = simulate_end_times(&t, &tasks).expect("fresh").iter().map(|e| e.to_bits()).collect();
        let reused: Vec<u64> =
            simulate_end_times_in(&mut workspace, &t, &tasks).expect("reused").iter().map(|e| e.to_bits()).collect();
        assert_eq!(reused, fresh, "{name}");
    }
}

#[test]
fn a_faster_flow_takes_what_a_slower_one_leaves() {
    // 0->1 and 2->1 share ingress[1]; 2->3 shares egress[2] with 2->1. Max-min: all three
    // at 225 GB/s until the 0.5 GB flows end, then 2->3 alone at 450.
    let tasks = vec![
        SimTask::transfer("a", s(0), s(1), 0.5 * GB),
        SimTask::transfer("b", s(2), s(1), 0.5 * GB),
        SimTask::transfer("c", s(2), s(3), GB),
    ];
    let trace = simulate(&h100(), &tasks).expect("simulate");
    let half = 0.5 * GB / (225.0 * GB);
    assert_eq!(trace.tasks()[0].end, half);
    assert_eq!(trace.tasks()[1].end, half);
    assert!((trace.tasks()[2].end - (half + 0.5 * GB / (450.0 * GB))).abs() < 1e-15);
}

/// Two 0.5 GB chunks on one ordered pair: fair sharing gives each half the link, so both
/// arrive at the end; FIFO serves the first alone, which arrives at half that time, and
/// then the second, which ends when fair sharing ended both.
#[test]
fn fifo_serves_two_chunks_on_one_link_in_order() {
    let tasks = vec![
        SimTask::transfer("c1", s(0), s(1), 0.5 * GB),
        SimTask::transfer("c2", s(0), s(1), 0.5 * GB),
        SimTask::aggregate("sum c1", s(1), 1.0 * GB, 0.5 * GB).after([SimTaskId(0)]),
    ];
    let both = GB / (450.0 * GB);
    let fair = simulate(&h100().with_service(LinkService::Fair), &tasks).expect("fair");
    assert_eq!((fair.tasks()[0].end, fair.tasks()[1].end), (both, both));
    let fifo = simulate(&h100().with_service(LinkService::Fifo), &tasks).expect("fifo");
    assert_eq!(fifo.tasks()[0].end, both / 2.0);
    assert!((fifo.tasks()[1].end - both).abs() < 1e-15 * both.max(1.0));
    // the ⊕ of the first chunk overlaps the second's transfer
    assert_eq!(fifo.tasks()[2].start, both / 2.0);
    assert!(fifo.tasks()[2].end < fair.tasks()[2].end);
    // the queued transfer's task started with the first (it was issued), its bytes later
    assert_eq!(fifo.tasks()[1].start, 0.0);
    assert_eq!(fifo.bytes_through("ingress[1]"), fair.bytes_through("ingress[1]"));
}

/// FIFO serves one ordered pair: the reverse direction, another destination and a
/// multicast's other destinations are other channels and share fairly, and a transfer
/// issued later (its dependency ended later) waits behind one issued earlier even if it
/// comes first in the task list.
#[test]
fn fifo_channels_are_ordered_pairs_in_issue_order() {
    let t = h100().with_service(LinkService::Fifo);
    let one = GB / (450.0 * GB);
    let tasks = vec![
        SimTask::compute("late", s(0), one / 4.0),
        SimTask::transfer("issued second", s(0), s(1), GB).after([SimTaskId(0)]),
        SimTask::transfer("issued first", s(0), s(1), GB),
        SimTask::transfer("back", s(1), s(0), GB),
    ];
    let trace = simulate(&t, &tasks).expect("simulate");
    // 0->1 alone on its channel: 1 GB at 450 GB/s; the reverse link is its own channel.
    assert_eq!(trace.tasks()[2].end, one);
    assert_eq!(trace.tasks()[3].end, one);
    assert!((trace.tasks()[1].end - 2.0 * one).abs() < 1e-15);
    // a multicast to 1 and 2 plus a transfer to 2: channel 0->2 serves two flows in order,
    // while 0->1 shares the egress with 0->2's head
    let tasks =
        vec![SimTask::multicast("m", s(0), vec![s(1), s(2)], 0.5 * GB), SimTask::transfer("t", s(0), s(2), 0.5 * GB)];
    let trace = simulate(&t, &tasks).expect("simulate");
    assert_eq!(trace.tasks()[0].deliveries[0], (s(1), one));
    assert_eq!(trace.tasks()[0].deliveries[1], (s(2), one));
    assert!((trace.tasks()[1].end - one * 1.5).abs() < 1e-15, "{}", trace.tasks()[1].end);
}

/// Three rounds of chunks on every ordered pair of a machine with latencies: two issued at
/// once (each channel queues the second), the third after another pair's second. FIFO
/// ends every transfer, moves the same bytes, delivers the first round at twice the rate
/// fair sharing gives it, and ends no later.
#[test]
fn fifo_runs_every_transfer_of_a_busy_machine() {
    let t = Topology::preset("dgx-a100").expect("preset");
    assert_eq!(t.service(), LinkService::Fifo);
    let pairs: Vec<(usize, usize)> =
        (0..8).flat_map(|a| (0..8).filter(move |&b| b != a).map(move |b| (a, b))).collect();
    let mut tasks = Vec::new();
    for k in 0..3 {
        for (p, &(a, b)) in pairs.iter().enumerate() {
            let deps = (k == 2).then_some(SimTaskId(pairs.len() + (p + 1) % pairs.len()));
            tasks.push(SimTask::transfer("x", s(a), s(b), 0.01 * GB * (1 + k) as f64).after(deps));
        }
    }
    let fair = simulate(&t.clone().with_service(LinkService::Fair), &tasks).expect("fair");
    let fifo = simulate(&t, &tasks).expect("fifo");
    assert!(fifo.tasks().iter().all(|task| task.end.is_finite() && task.end > 0.0));
    assert_eq!(fifo.bytes_through("egress[3]"), fair.bytes_through("egress[3]"));
    let setup = t.latency().link;
    let (first_fair, first_fifo) = (fair.tasks()[0].end - setup, fifo.tasks()[0].end - setup);
    assert!((first_fair - 2.0 * first_fifo).abs() < 1e-9 * first_fair, "{first_fair} vs {first_fifo}");
    assert!(fifo.completion() <= fair.completion() * (1.0 + 1e-9));
}

#[test]
fn bad_graphs_are_typed_errors() {
    let t = h100();
    let run = |tasks: Vec<SimTask>| simulate(&t, &tasks).unwrap_err();
    assert!(matches!(
        run(vec![SimTask::transfer("x", s(0), s(1), GB).after([SimTaskId(5)])]),
        SimError::UnknownDependency { dep: SimTaskId(5), count: 1, .. }
    ));
    assert!(matches!(run(vec![SimTask::transfer("x", s(0), s(8), GB)]), SimError::UnknownSite { site: SiteId(8), .. }));
    assert!(matches!(run(vec![SimTask::aggregate("x", s(9), 1.0, 1.0)]), SimError::UnknownSite { .. }));
    assert!(matches!(run(vec![SimTask::transfer("x", s(3), s(3), GB)]), SimError::SameSite { .. }));
    assert!(matches!(run(vec![SimTask::multicast("x", s(3), vec![s(1), s(3)], GB)]), SimError::SameSite { .. }));
    assert!(matches!(
        run(vec![SimTask::multicast("x", s(0), vec![s(1), s(2), s(1)], GB)]),
        SimError::DuplicateDestination { site: SiteId(1), .. }
    ));
    assert!(matches!(
        run(vec![SimTask::aggregate("x", s(0), 1.0, f64::NAN)]),
        SimError::InvalidBytes { field: "write_bytes", .. }
    ));
    assert!(matches!(run(vec![SimTask::transfer("x", s(0), s(1), -1.0)]), SimError::InvalidBytes { .. }));
    assert!(matches!(run(vec![SimTask::transfer("x", s(0), s(1), f64::INFINITY)]), SimError::InvalidBytes { .. }));
}

#[test]
fn cycles_are_reported_with_their_members() {
    let t = h100();
    let self_loop = vec![SimTask::transfer("me", s(0), s(1), GB).after([SimTaskId(0)])];
    let err = simulate(&t, &self_loop).unwrap_err();
    assert_eq!(err, SimError::Cycle { tasks: vec![SimTaskId(0)], labels: vec!["me".into()] });
    assert_eq!(err.to_string(), "dependency cycle: #0 (`me`) needs #0 (`me`)");

    let tasks = vec![
        SimTask::transfer("root", s(0), s(1), GB),
        SimTask::transfer("a", s(0), s(1), GB).after([SimTaskId(0), SimTaskId(3)]),
        SimTask::transfer("b", s(0), s(1), GB).after([SimTaskId(1)]),
        SimTask::transfer("c", s(0), s(1), GB).after([SimTaskId(2)]),
        SimTask::transfer("after", s(0), s(1), GB).after([SimTaskId(3)]),
    ];
    let SimError::Cycle { mut tasks, .. } = simulate(&t, &tasks).unwrap_err() else { panic!("expected a cycle") };
    tasks.sort();
    assert_eq!(tasks, [SimTaskId(1), SimTaskId(2), SimTaskId(3)]);
}
