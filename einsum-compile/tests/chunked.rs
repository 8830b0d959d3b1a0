//! Exchange programs over chunked atoms (`einsum_exprog::refine`) lowered to a task graph and
//! run by the reference interpreter: the chunks are sliced from the producers' partial
//! blocks, summed chunk by chunk, moved, and stitched back into each consumer's block.

use std::collections::BTreeSet;

use einsum_compile::{ExchangeSources, lower_exchange};
use einsum_core::taskgraph::{Boundary, BufferId, DeviceId, Task, TaskGraph, interpret};
use einsum_core::{Aggregation, DType, HostTensor, KernelLibrary, TensorType, scaled_error};
use einsum_exprog::synth::{SearchOptions, naive, search};
use einsum_exprog::{Membership, PartitionSpec, Program, SiteId, Upstream, preamble, refine};
use einsum_joinagg::{FunctionSpec, JoinAggSpec};
use einsum_sim::Topology;

const F32: DType = DType::F32;
const SITES: usize = 4;

/// No kernels: the graph only slices, aggregates, moves and stitches.
struct NoKernels;

impl KernelLibrary for NoKernels {
    fn run(&self, kernel: usize, _: &[HostTensor], _: &[(TensorType, DType)]) -> Result<Vec<HostTensor>, String> {
        Err(format!("no kernel {kernel}"))
    }
    fn name(&self, kernel: usize) -> String {
        format!("kernel {kernel}")
    }
}

/// Runs `program` (over `pre`'s atoms, possibly chunked) with every producer holding a
/// partial copy of the whole `[8, 8]` input, and checks that consumer `i`'s rows hold the sum
/// of the copies: `SITES` times the input.
fn run_exchange(pre: &einsum_exprog::Preamble, program: &Program, membership: &Membership) {
    let closure = program.validate_with(membership).unwrap_or_else(|e| panic!("{e}\n{program}")).closure;
    let whole = TensorType::zero_bounded(&[8, 8]);
    let io = |name: &str| Boundary { name: name.into(), ty: whole.clone(), dtype: F32 };
    let mut graph = TaskGraph::new(SITES, vec![io("x")], vec![io("y")]);
    let holders: Vec<BufferId> = (0..SITES)
        .map(|i| {
            let b = graph.add_buffer(DeviceId(i as u32), whole.clone(), F32);
            graph.push(Task::Load { input: 0, dst: b }, &[], "load").unwrap();
            b
        })
        .collect();
    let placement: Vec<DeviceId> = pre
        .consumers
        .iter()
        .map(|c| DeviceId(membership.sites(&c.partition).unwrap().iter().next().unwrap().0 as u32))
        .collect();
    let sources =
        ExchangeSources { holders: &holders, aggregation: Aggregation::Sum, placement: &placement, label: "chunked" };
    let blocks = lower_exchange(&mut graph, pre, &closure, &sources).unwrap();
    for b in blocks {
        graph.push(Task::Store { output: 0, src: b }, &[], "store").unwrap();
    }
    let x = HostTensor::random(whole.clone(), F32, 5);
    let got = interpret(&graph, &NoKernels, std::slice::from_ref(&x)).unwrap();
    let expected =
        HostTensor::from_f32(whole, F32, x.as_f32().unwrap().iter().map(|v| v * SITES as f32).collect()).unwrap();
    assert!(scaled_error(&got[0], &expected, 1.0) < 1e-5);
}

/// `SITES` producers each holding a partial copy of all of `[8, 8]`; consumer `i` reads
/// rows `2i..2i+2`, on site `i`.
fn fixture() -> (einsum_exprog::Preamble, Membership) {
    let whole = TensorType::zero_bounded(&[8, 8]);
    let producer = JoinAggSpec { functions: vec![FunctionSpec { inputs: vec![], outputs: vec![whole] }; SITES] };
    let consumer = JoinAggSpec {
        functions: (0..SITES)
            .map(|i| FunctionSpec {
                inputs: vec![TensorType::new(&[2 * i, 0], &[2 * i + 2, 8]).unwrap()],
                outputs: vec![],
            })
            .collect(),
    };
    let sites: Vec<SiteId> = (0..SITES).map(SiteId).collect();
    let mut pre =
        preamble(&Upstream::Spec { spec: &producer, output: 0, placement: &sites }, &consumer, 0, F32, &sites).unwrap();
    for (i, c) in pre.consumers.clone().iter().enumerate() {
        pre.program.partitions.insert(c.partition.clone(), PartitionSpec::Members(BTreeSet::from([SiteId(i)])));
    }
    let membership = pre.program.declared_membership();
    (pre, membership)
}

#[test]
fn a_chunked_program_computes_the_same_sums() {
    let (pre, membership) = fixture();
    assert_eq!(pre.atoms.len(), 4);
    assert_eq!(pre.max_chunks(), 8);
    // Whole atoms, then every atom cut in 2, 3 (uneven: 8 columns) and 8.
    run_exchange(&pre, &naive(&pre.program).unwrap(), &membership);
    for chunks in [2, 3, 8] {
        let refined = pre.refined(chunks).unwrap();
        assert_eq!(refined.atoms.len(), 4 * chunks);
        // The refined program of the naive body, and the naive body of the refined preamble.
        let cut = refine(&naive(&pre.program).unwrap(), chunks).unwrap();
        assert_eq!(pre.refined_for(&cut).unwrap(), refined);
        run_exchange(&refined, &cut, &membership);
        run_exchange(&refined, &naive(&refined.program).unwrap(), &membership);
    }
    assert!(pre.refined(9).is_err(), "8 columns cannot be cut in 9");
}

#[test]
fn a_searched_program_over_chunks_computes_the_same_sums() {
    let (pre, membership) = fixture();
    // Cut in 4 by hand (the search itself does not cut atoms this small), then searched.
    let refined = pre.refined(4).unwrap();
    let v100 = Topology::preset("dgx-v100").unwrap();
    let options = SearchOptions { seed: 2, iterations: 30, max_chunks: 1, ..SearchOptions::default() };
    let found = search(&refined.program, &v100, options).unwrap();
    assert_eq!(found.chunks, 1);
    assert_eq!(found.membership, membership);
    run_exchange(&refined, &found.program, &membership);
}
