//! A plan run over the ranks of a job, each rank a thread of this process with its own
//! compile of the same graph, its transfers to other ranks carried by the in-process
//! transport (`einsum_dist::Local`): rank 0's gathered outputs equal the single-process CPU
//! backend's bit for bit; each rank sends the bytes the plan's inter-rank traffic predicts;
//! a rank that never runs makes the others fail, naming it.

use std::{sync::Arc, time::Duration};

use einsum_core::{BackendError, HostTensor};
use einsum_cpu::CpuBackend;
use einsum_dist::{Local, RankBackend, RankLayout, Transport, inter_rank_bytes};
use einsum_sim::Topology;
use einsummable::{CompileOptions, DType, Error, Workload, compile};

const WORKLOAD: &str = "llama-block:tokens=64,seqs=2,d_model=64,heads_q=8,heads_kv=4,d_head=8,d_ff=128";

/// The CPU backend every rank and the single-process run use (the command line's: fusion on).
fn cpu() -> CpuBackend {
    CpuBackend::with_threads(2).with_fusion(&einsum_ops::fused::RULES)
}

fn options(devices: usize, topology: &str) -> CompileOptions {
    CompileOptions::new().devices(devices).topology(Topology::preset(topology).expect("a preset"))
}

/// What one rank did: its outputs (rank 0's whole ones, none elsewhere), the bytes it sent
/// to each rank, and the predicted bytes from it to each rank.
struct RankRun {
    outputs: Vec<HostTensor>,
    sent: Vec<u64>,
    predicted: Vec<u64>,
}

/// Runs `WORKLOAD` on `devices` devices of `topology` over `ranks` ranks, `runs` times.
fn over_ranks(devices: usize, topology: &str, ranks: usize, runs: usize) -> Vec<RankRun> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = Local::job(ranks)
            .into_iter()
            .map(|transport| {
                scope.spawn(move || {
                    let transport: Arc<dyn Transport> = Arc::new(transport);
                    let rank = transport.rank();
                    let t = Topology::preset(topology).expect("a preset");
                    let backend = RankBackend::new("ranks", transport, cpu()).for_topology(t);
                    let graph = Workload::parse(WORKLOAD).unwrap().build(DType::F32).unwrap();
                    let mut exe = compile(&graph, &options(devices, topology).backend(Arc::new(backend.clone())))
                        .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
                    exe.load_random(11).unwrap();
                    for _ in 0..runs {
                        exe.execute().unwrap_or_else(|e| panic!("rank {rank}: {e}"));
                    }
                    let layout = RankLayout::contiguous(devices, ranks).unwrap();
                    let predicted = inter_rank_bytes(&exe.compiled().graph, &layout).unwrap().swap_remove(rank);
                    let saved = graph.computation().saved().to_vec();
                    let outputs = saved.iter().filter_map(|t| exe.outputs().get(t).cloned()).collect();
                    RankRun {
                        outputs,
                        sent: backend.bytes_sent(),
                        predicted: predicted.iter().map(|b| b * runs as u64).collect(),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a rank panicked")).collect()
    })
}

/// The single-process CPU backend's outputs on the same inputs.
fn single_process(devices: usize, topology: &str) -> Vec<HostTensor> {
    let graph = Workload::parse(WORKLOAD).unwrap().build(DType::F32).unwrap();
    let mut exe = compile(&graph, &options(devices, topology).backend(Arc::new(cpu()))).unwrap();
    exe.load_random(11).unwrap();
    exe.execute().unwrap();
    graph.computation().saved().iter().map(|t| exe.outputs()[t].clone()).collect()
}

#[test]
fn eight_devices_over_two_and_four_ranks_equal_one_process_bit_for_bit() {
    let want = single_process(8, "dgx-a100");
    let mut exchanged = Vec::new();
    for ranks in [2, 4] {
        let runs = over_ranks(8, "dgx-a100", ranks, 2);
        assert_eq!(runs[0].outputs, want, "{ranks} ranks");
        assert!(runs[1..].iter().all(|r| r.outputs.is_empty()), "only rank 0 has the outputs");
        for (rank, r) in runs.iter().enumerate() {
            assert_eq!(r.sent, r.predicted, "rank {rank} of {ranks}: bytes sent to each rank");
        }
        exchanged.push(runs.iter().map(|r| r.sent.iter().sum::<u64>()).sum::<u64>());
    }
    // The plan splits the two sequences over the two halves of the devices (nothing crosses
    // 2 ranks), and the heads within each half (the 4 ranks exchange blocks), two runs each.
    assert_eq!(exchanged, [0, 2 * 2 * 8192]);
}

/// A 16-device plan of two DGX nodes, one rank per node and two per node.
#[test]
fn two_nodes_over_two_and_four_ranks_equal_one_process_bit_for_bit() {
    let want = single_process(16, "dgx-a100x2");
    for ranks in [2, 4] {
        let runs = over_ranks(16, "dgx-a100x2", ranks, 1);
        assert_eq!(runs[0].outputs, want, "{ranks} ranks");
        for (rank, r) in runs.iter().enumerate() {
            assert_eq!(r.sent, r.predicted, "rank {rank} of {ranks}");
        }
        assert!(runs.iter().map(|r| r.sent.iter().sum::<u64>()).sum::<u64>() > 0, "the ranks exchange blocks");
    }
}

/// One rank per device of a two-node plan crosses nodes nowhere, but one rank for both nodes
/// would: refused before anything runs, naming the rank and the nodes.
#[test]
fn a_rank_spanning_two_nodes_is_refused() {
    let transport: Arc<dyn Transport> = Arc::new(Local::job(1).pop().unwrap());
    let backend = RankBackend::new("ranks", transport, cpu()).for_topology(Topology::preset("dgx-a100x2").unwrap());
    let graph = Workload::parse(WORKLOAD).unwrap().build(DType::F32).unwrap();
    let Err(e) = compile(&graph, &options(16, "dgx-a100x2").backend(Arc::new(backend))) else { panic!("refused") };
    assert!(e.to_string().contains("rank 0 would own devices 0..16"), "{e}");
}

/// Rank 1 prepares, then is gone before running: rank 0 gives up after its patience with an
/// error that names rank 1 and the transfer it waited for.
#[test]
fn a_rank_that_never_runs_is_named() {
    let mut job = Local::job(2);
    let gone = job.pop().unwrap();
    let zero: Arc<dyn Transport> = Arc::new(job.pop().unwrap());
    let errors = std::thread::scope(|scope| {
        let one = scope.spawn(move || {
            let transport: Arc<dyn Transport> = Arc::new(gone);
            let backend = RankBackend::new("ranks", transport, cpu());
            let graph = Workload::parse(WORKLOAD).unwrap().build(DType::F32).unwrap();
            // Prepared (it agrees on the graph), then dropped without a run.
            compile(&graph, &options(8, "dgx-a100").backend(Arc::new(backend))).map(drop)
        });
        let backend = RankBackend::new("ranks", zero, cpu()).with_patience(Duration::from_millis(300));
        let graph = Workload::parse(WORKLOAD).unwrap().build(DType::F32).unwrap();
        let mut exe = compile(&graph, &options(8, "dgx-a100").backend(Arc::new(backend))).unwrap();
        exe.load_random(1).unwrap();
        let Err(e) = exe.execute() else { panic!("rank 1 never sends") };
        (one.join().unwrap(), e)
    });
    errors.0.expect("rank 1 prepared");
    let Error::Backend(BackendError::Task { reason, .. }) = &errors.1 else { panic!("{}", errors.1) };
    assert!(reason.contains("rank 1"), "{reason}");
}

/// Prepares the two-node plan over 4 ranks on the given hosts; rank 0's outcome.
fn prepared_on(hosts: [&str; 4]) -> Result<(), String> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = Local::job(4)
            .into_iter()
            .zip(hosts)
            .map(|(transport, host)| {
                scope.spawn(move || {
                    let transport: Arc<dyn Transport> = Arc::new(transport.on_host(host));
                    let t = Topology::preset("dgx-a100x2").expect("a preset");
                    let backend = RankBackend::new("ranks", transport, cpu()).for_topology(t);
                    let graph = Workload::parse(WORKLOAD).unwrap().build(DType::F32).unwrap();
                    compile(&graph, &options(16, "dgx-a100x2").backend(Arc::new(backend))).map(drop)
                })
            })
            .collect();
        let mut outcomes = handles.into_iter().map(|h| h.join().expect("a rank panicked"));
        outcomes.next().expect("rank 0").map_err(|e| e.to_string())
    })
}

/// Ranks of one simulated node on one host pass; a node whose ranks the job put on two hosts
/// is refused by rank 0, naming the ranks, the node and the hosts.
#[test]
fn the_ranks_of_a_node_must_share_a_host() {
    prepared_on(["a", "a", "b", "b"]).expect("node 0 on host a, node 1 on host b");
    let e = prepared_on(["a", "b", "a", "b"]).expect_err("node 0 over hosts a and b");
    assert!(e.contains("ranks 0 and 1 own devices of simulated node 0 but run on hosts `a` and `b`"), "{e}");
}
