//! Latencies change predictions the right way: a transfer or kernel waits its latency before
//! it moves anything, latencies take no bandwidth from concurrent flows, each kind of path
//! has its own figure, and a topology without latencies is the pure fluid model.

use einsum_sim::{
    A100_LATENCY, GB, Latency, NVLINK_TRANSFER_US, SimGraph, SimTask, SimTaskId, SiteId, Topology, US, V100_LATENCY,
};

fn s(i: usize) -> SiteId {
    SiteId(i)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1e-9)
}

fn zero(t: Topology) -> Topology {
    t.with_latency(Latency::ZERO).expect("zero latency is valid")
}

/// One byte over NVSwitch takes its setup latency and then a byte's worth of bandwidth;
/// without latencies it takes only the latter.
#[test]
fn a_tiny_transfer_costs_at_least_its_latency() {
    let a100 = Topology::preset("dgx-a100").expect("preset");
    assert_eq!(a100.latency().link, NVLINK_TRANSFER_US * US);
    let mut g = SimGraph::new();
    g.push(SimTask::transfer("byte", s(0), s(5), 1.0));
    let trace = g.simulate(&a100).expect("simulate");
    let t = &trace.tasks()[0];
    assert_eq!(t.start, 0.0);
    assert!(close(t.end, 3.0 * US + 1.0 / (300.0 * GB)), "{}", t.end);
    assert_eq!(t.deliveries[0].1, t.end);
    assert!(close(trace.transfer_time(), t.end));
    let fluid = g.simulate(&zero(a100)).expect("simulate");
    assert!(close(fluid.completion(), 1.0 / (300.0 * GB)));
}

/// Latencies are delays, not bytes: a tiny transfer sharing the receiver's ingress with a
/// large one slows it only by its byte, and ten tiny transfers issued at once pay the
/// latency once, side by side.
#[test]
fn latencies_take_no_bandwidth_from_concurrent_flows() {
    let a100 = Topology::preset("dgx-a100").expect("preset");
    let link = a100.latency().link;
    let alone = {
        let mut g = SimGraph::new();
        g.push(SimTask::transfer("big", s(0), s(1), GB));
        g.simulate(&a100).expect("simulate").tasks()[0].end
    };
    assert!(close(alone, link + GB / (300.0 * GB)));
    let mut g = SimGraph::new();
    g.push(SimTask::transfer("big", s(0), s(1), GB));
    for k in 2..8 {
        g.push(SimTask::transfer(format!("tiny {k}"), s(k), s(1), 8.0));
    }
    let trace = g.simulate(&a100).expect("simulate");
    // The six tiny ones enter together after their latency and share ingress[1] with the
    // big one: they end a few bytes later, not six latencies later.
    for k in 1..7 {
        let end = trace.tasks()[k].end;
        assert!(end >= link && end < 2.0 * link, "tiny {k} ends at {end}");
    }
    let big = trace.tasks()[0].end;
    assert!(big >= alone && big <= alone + 48.0 / (300.0 * GB) * (1.0 + 1e-9), "{big} vs {alone}");
}

/// Each kind of path has its own setup latency: NVLink between linked DGX-1V pairs, the PCIe
/// bridge between the others, InfiniBand between nodes.
#[test]
fn each_kind_of_path_has_its_latency() {
    let v100 = Topology::preset("dgx-v100").expect("preset");
    assert_eq!(*v100.latency(), V100_LATENCY);
    assert_eq!(v100.transfer_latency(s(0), s(3)), Some(V100_LATENCY.link));
    assert_eq!(v100.transfer_latency(s(0), s(5)), Some(V100_LATENCY.bus));
    assert_eq!(v100.transfer_latency(s(0), s(0)), None);
    assert_eq!(v100.transfer_latency(s(0), s(8)), None);
    assert_eq!(v100.max_transfer_latency(), V100_LATENCY.bus);
    let two = Topology::preset("dgx-a100x2").expect("preset");
    assert_eq!(two.transfer_latency(s(0), s(7)), Some(A100_LATENCY.link));
    assert_eq!(two.transfer_latency(s(0), s(8)), Some(A100_LATENCY.network));
    assert_eq!(two.max_transfer_latency(), A100_LATENCY.network.max(A100_LATENCY.link));
    let mut g = SimGraph::new();
    g.push(SimTask::transfer("bridge", s(0), s(5), 1.0));
    g.push(SimTask::multicast("both", s(0), vec![s(3), s(5)], 1.0));
    let trace = g.simulate(&v100).expect("simulate");
    for t in trace.tasks() {
        assert!(t.end >= V100_LATENCY.bus, "{}: {}", t.label, t.end);
    }
    let one = Topology::preset("dgx-a100").expect("preset");
    assert_eq!(one.max_transfer_latency(), A100_LATENCY.link);
}

/// A chain of dependent kernels pays one launch per kernel; kernels that are ready together
/// overlap their launches; a zero-second marker launches nothing.
#[test]
fn many_small_kernels_cost_launch_overhead_each() {
    let a100 = Topology::preset("dgx-a100").expect("preset");
    let launch = a100.latency().kernel_launch;
    assert!(launch > 0.0);
    let (n, work) = (20, 1e-6);
    let mut chain = SimGraph::new();
    for k in 0..n {
        let task = SimTask::compute(format!("k{k}"), s(0), work);
        chain.push(if k == 0 { task } else { task.after([SimTaskId(k - 1)]) });
    }
    let trace = chain.simulate(&a100).expect("simulate");
    assert!(close(trace.completion(), n as f64 * (launch + work)), "{}", trace.completion());
    assert!(close(chain.simulate(&zero(a100.clone())).expect("simulate").completion(), n as f64 * work));

    let mut fan = SimGraph::new();
    for k in 0..n {
        fan.push(SimTask::compute(format!("k{k}"), s(0), work));
    }
    assert!(close(fan.simulate(&a100).expect("simulate").completion(), launch + n as f64 * work));

    let mut markers = SimGraph::new();
    let first = markers.push(SimTask::compute("load", s(0), 0.0));
    markers.push(SimTask::aggregate("noop", s(0), 0.0, 0.0).after([first]));
    markers.push(SimTask::transfer("empty", s(0), s(1), 0.0).after([first]));
    assert_eq!(markers.simulate(&a100).expect("simulate").completion(), 0.0);
    // An aggregation is a kernel too.
    let mut agg = SimGraph::new();
    agg.push(SimTask::aggregate("sum", s(2), 2.0 * GB, GB));
    assert!(close(agg.simulate(&a100).expect("simulate").completion(), launch + 3.0 * GB / (1555.0 * GB)));
}

/// The paper's Example 5.1 on a DGX-H100: without latencies exactly the fluid model's
/// figures (two 1 GB transfers at 450 GB/s each way, then a 3 GB aggregation at 3350 GB/s);
/// with the preset's, those plus one transfer setup and one launch.
#[test]
fn zero_latency_reproduces_the_fluid_figures() {
    let h100 = Topology::preset("dgx-h100").expect("preset");
    let mut g = SimGraph::new();
    let a = g.push(SimTask::transfer("A @ 0 -> 1", s(0), s(1), GB));
    let b = g.push(SimTask::transfer("B @ 1 -> 0", s(1), s(0), GB));
    g.push(SimTask::aggregate("A+B @ 0", s(0), 2.0 * GB, GB).after([b]));
    g.push(SimTask::aggregate("A+B @ 1", s(1), 2.0 * GB, GB).after([a]));
    let (transfer, aggregate) = (GB / (450.0 * GB), 3.0 * GB / (3350.0 * GB));
    let fluid = g.simulate(&zero(h100.clone())).expect("simulate");
    assert_eq!(fluid.transfer_time(), transfer);
    assert_eq!(fluid.completion(), transfer + aggregate);
    let l = *h100.latency();
    let real = g.simulate(&h100).expect("simulate");
    assert!(close(real.transfer_time(), l.link + transfer));
    assert!(close(real.completion(), l.link + transfer + l.kernel_launch + aggregate));
}

/// Latencies survive the JSON format, and files without them load with none.
#[test]
fn latencies_round_trip_through_json_and_default_to_zero() {
    let a100 = Topology::preset("dgx-a100").expect("preset");
    let text = a100.to_json_string();
    assert!(
        text.contains(r#""latency": {"kernel_launch_us": 2, "link_us": 3, "bus_us": 10, "network_us": 5}"#),
        "{text}"
    );
    assert!(text.contains(r#""sms": 108"#), "{text}");
    assert_eq!(Topology::from_json_str(&text), Ok(a100.clone()));
    let fluid = zero(a100);
    let text = fluid.to_json_string();
    assert!(!text.contains("latency"), "{text}");
    assert_eq!(Topology::from_json_str(&text), Ok(fluid));
    let odd = Latency { kernel_launch: 0.1 * US, link: 1.7 * US, bus: 1e-9, network: 123.456 * US };
    let t = Topology::preset("dgx-a100x2").and_then(|t| t.with_latency(odd)).expect("valid");
    assert_eq!(Topology::from_json_str(&t.to_json_string()).map(|t| *t.latency()), Ok(odd));
}

#[test]
fn negative_or_non_finite_latencies_are_refused() {
    let a100 = || Topology::preset("dgx-a100").expect("preset");
    let e = a100().with_latency(Latency { bus: -2.0 * US, ..Latency::ZERO }).unwrap_err().to_string();
    assert!(e.starts_with("latency.bus_us: ") && e.contains("-2"), "{e}");
    assert!(a100().with_latency(Latency { kernel_launch: f64::NAN, ..Latency::ZERO }).is_err());
    assert!(a100().with_latency(Latency { network: f64::INFINITY, ..Latency::ZERO }).is_err());
}

/// `fluid` is the same machine without latencies or SM counts: the model every figure
/// before latencies was computed with.
#[test]
fn fluid_drops_latencies_and_sm_counts_only() {
    let a100 = Topology::preset("dgx-a100x2").expect("preset");
    let fluid = a100.fluid();
    assert_eq!(*fluid.latency(), Latency::ZERO);
    assert!(fluid.sites().iter().all(|s| s.sms.is_none()));
    assert_eq!((fluid.resources(), fluid.nodes(), fluid.name()), (a100.resources(), a100.nodes(), a100.name()));
    let mut sites = a100.sites().to_vec();
    sites.iter_mut().for_each(|s| s.sms = None);
    assert_eq!(fluid.sites(), &sites[..]);
}
