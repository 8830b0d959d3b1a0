//! Preamble generation (Section 5.3): Example 5.4 exactly, replicated and computation
//! inputs, and properties of random producer/consumer pairs (atoms tile every block, `OUT`
//! aggregates hold every copy, the naive gather program over the preamble is valid).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::{Chance, Rng, naive};
use einsum_core::{DType, Interval, TensorType, Tiling, check_tiling};
use einsum_exprog::{
    AtomId, DEFAULT_SIZE_GB, Membership, PartitionId, Program, SiteId, Target, Upstream, parse, preamble,
};
use einsum_joinagg::{FunctionSpec, JoinAggSpec, combinations};
use proptest::prelude::*;

fn sites(s: &[usize]) -> Vec<SiteId> {
    s.iter().map(|&i| SiteId(i)).collect()
}

fn iv(lo: usize, hi: usize) -> Interval {
    Interval { lo, hi }
}

fn atom(name: &str) -> AtomId {
    AtomId::new(name).unwrap()
}

fn part(name: &str) -> PartitionId {
    PartitionId::new(name).unwrap()
}

/// The matmul of Example 3.8 with the four-specification spec {F_mn} of Example 3.9:
/// i = k = 256, j = 512; F_mn takes the m-th half of i and the n-th half of j, all of k.
fn example_3_8_matmul() -> JoinAggSpec {
    let halves_i = [iv(0, 128), iv(128, 256)];
    let halves_j = [iv(0, 256), iv(256, 512)];
    let k = iv(0, 256);
    let mut functions = Vec::new();
    for i in halves_i {
        for j in halves_j {
            functions.push(FunctionSpec {
                inputs: vec![TensorType::from_intervals(vec![i, j]), TensorType::from_intervals(vec![j, k])],
                outputs: vec![TensorType::from_intervals(vec![i, k])],
            });
        }
    }
    JoinAggSpec { functions }
}

/// A row-wise softmax over [256, 256] whose spec splits the rows into four blocks of 64.
fn row_softmax() -> JoinAggSpec {
    let functions = (0..4)
        .map(|q| {
            let rows = TensorType::from_intervals(vec![iv(64 * q, 64 * (q + 1)), iv(0, 256)]);
            FunctionSpec { inputs: vec![rows.clone()], outputs: vec![rows] }
        })
        .collect();
    JoinAggSpec { functions }
}

/// The same program with every atom of the default size (the paper prints no sizes).
fn without_sizes(p: &Program) -> Program {
    let mut q = p.clone();
    for input in q.inputs.values_mut() {
        input.size_gb = DEFAULT_SIZE_GB;
    }
    q
}

#[test]
fn example_5_4_is_generated_exactly() {
    let producer = example_3_8_matmul();
    let gpus = sites(&[0, 1, 2, 3]);
    let upstream = Upstream::Spec { spec: &producer, output: 0, placement: &gpus };
    let p = preamble(&upstream, &row_softmax(), 0, DType::F16, &gpus).unwrap();

    // The program, printed and read back, is the checked-in preamble (sizes aside).
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/example_5_4_preamble.exprog");
    let expected = parse(&std::fs::read_to_string(path).unwrap()).unwrap();
    let printed = p.program.to_string();
    let reparsed = parse(&printed).unwrap();
    assert_eq!(reparsed, p.program, "parse∘print is the identity on\n{printed}");
    assert_eq!(without_sizes(&reparsed), expected);
    assert!(p.program.body.is_empty());
    assert!(p.program.check().is_ok());

    // The IN list in the paper's order (by site, then name) is the paper's text verbatim.
    let mut ins: Vec<(SiteId, &AtomId)> = p.program.inputs.iter().map(|(a, i)| (i.site, a)).collect();
    ins.sort();
    let ins: Vec<String> = ins.iter().map(|(s, a)| format!("{a} @ {s}")).collect();
    assert_eq!(ins.join("; "), "X1 @ 0; X2 @ 0; Y1 @ 1; Y2 @ 1; X3 @ 2; X4 @ 2; Y3 @ 3; Y4 @ 3");
    let outs: Vec<String> = p.program.outputs.iter().map(|r| r.to_string()).collect();
    assert_eq!(outs.join("; "), "X1+Y1 @ S1; X2+Y2 @ S2; X3+Y3 @ S3; X4+Y4 @ S4");
    assert_eq!(
        printed.lines().take(2).collect::<Vec<_>>(),
        ["GPUS: 0, 1, 2, 3", "PARTITIONS: S1 {size 1} S2 {size 1} S3 {size 1} S4 {size 1}"]
    );

    // Sizes: 64 x 256 elements of 2 bytes.
    for input in p.program.inputs.values() {
        assert_eq!(input.size_gb, 64.0 * 256.0 * 2.0 / 1e9);
    }

    // Metadata for lowering: atoms are the four row blocks; X copies come from F_m1, Y from F_m2.
    assert_eq!(p.whole, TensorType::zero_bounded(&[256, 256]));
    let rows: Vec<Interval> = p.atoms.iter().map(|a| a.block.dim(0)).collect();
    assert_eq!(rows, [iv(0, 64), iv(64, 128), iv(128, 192), iv(192, 256)]);
    assert_eq!(p.atoms[1].producer_block, TensorType::new(&[0, 0], &[128, 256]).unwrap());
    assert_eq!(p.atoms[2].copies, [atom("X3"), atom("Y3")]);
    let y3 = p.copy(&atom("Y3")).unwrap();
    assert_eq!((y3.atom, y3.copy, y3.site, y3.holder), (2, 1, SiteId(3), 3));
    let x2 = p.copy(&atom("X2")).unwrap();
    assert_eq!((x2.atom, x2.copy, x2.site, x2.holder), (1, 0, SiteId(0), 0));
    assert_eq!(p.aggregate(3).unwrap().to_string(), "X4+Y4");
    assert_eq!(p.aggregate(4), None);
    for (q, c) in p.consumers.iter().enumerate() {
        assert_eq!(c.partition, part(&format!("S{}", q + 1)));
        assert_eq!(c.atoms, [q]);
        assert_eq!(c.block, p.atoms[q].block);
    }

    // A body exists: the naive gather with S_i on GPU i - 1 makes the preamble valid, and the
    // membership search finds a placement by itself.
    let membership = Membership((0..4).map(|q| (part(&format!("S{}", q + 1)), BTreeSet::from([SiteId(q)]))).collect());
    let program = naive(&p.program, &membership);
    assert!(program.validate_with(&membership).is_ok(), "{program}");
    assert!(program.validate().is_ok());
}

#[test]
fn replicated_consumer_inputs_are_required_at_every_reader() {
    // Producer: a [4, 6] tensor split in column halves, each half summed from two partial
    // copies (a contraction split in two). Consumer: a matmul-like spec whose function specs
    // read row halves, two of them the same half (replication), two the whole tensor.
    let left = TensorType::new(&[0, 0], &[4, 3]).unwrap();
    let right = TensorType::new(&[0, 3], &[4, 6]).unwrap();
    let whole = TensorType::zero_bounded(&[4, 6]);
    let out = |b: &TensorType| FunctionSpec { inputs: vec![], outputs: vec![b.clone()] };
    let producer = JoinAggSpec { functions: vec![out(&left), out(&right), out(&left), out(&right)] };
    let top = TensorType::new(&[0, 0], &[2, 6]).unwrap();
    let read = |b: &TensorType| FunctionSpec { inputs: vec![whole.clone(), b.clone()], outputs: vec![] };
    let consumer = JoinAggSpec { functions: vec![read(&top), read(&top), read(&whole), read(&whole)] };
    let gpus = sites(&[0, 1, 2, 3]);
    let placement = sites(&[3, 2, 1, 0]);
    let upstream = Upstream::Spec { spec: &producer, output: 0, placement: &placement };
    let p = preamble(&upstream, &consumer, 1, DType::F32, &gpus).unwrap();

    // Overlay: rows {0, 2, 4} x columns {0, 3, 6}.
    assert_eq!(p.atoms.len(), 4);
    assert_eq!(p.atoms[1].block, TensorType::new(&[0, 3], &[2, 6]).unwrap());
    assert_eq!(p.consumers[0].atoms, [0, 1]);
    assert_eq!(p.consumers[3].atoms, [0, 1, 2, 3]);
    let printed = p.program.to_string();
    assert_eq!(
        printed,
        "GPUS: 0, 1, 2, 3\n\
         PARTITIONS: S1 {size 1} S2 {size 1} S3 {size 1} S4 {size 1}\n\
         IN: X1 @ 3 (size: 2.4e-8 GB); X2 @ 2 (size: 2.4e-8 GB); X3 @ 3 (size: 2.4e-8 GB); \
         X4 @ 2 (size: 2.4e-8 GB); Y1 @ 1 (size: 2.4e-8 GB); Y2 @ 0 (size: 2.4e-8 GB); \
         Y3 @ 1 (size: 2.4e-8 GB); Y4 @ 0 (size: 2.4e-8 GB)\n\
         OUT: X1+Y1 @ S1, S2, S3, S4; X2+Y2 @ S1, S2, S3, S4; X3+Y3 @ S3, S4; X4+Y4 @ S3, S4\n"
    );
    assert_eq!(parse(&printed).unwrap(), p.program);
    assert!(p.program.check().is_ok());
    let membership = Membership((0..4).map(|q| (part(&format!("S{}", q + 1)), BTreeSet::from([SiteId(q)]))).collect());
    assert!(naive(&p.program, &membership).validate_with(&membership).is_ok());
}

#[test]
fn computation_inputs_have_one_copy_per_block() {
    // An input stored in row thirds on sites 2, 0, 1; a consumer that wants column halves.
    let whole = TensorType::zero_bounded(&[6, 4]);
    let tiling = Tiling::grid(&whole, &[vec![2, 4], vec![]]).unwrap();
    let stored = sites(&[2, 0, 1]);
    let col =
        |lo, hi| FunctionSpec { inputs: vec![TensorType::from_intervals(vec![iv(0, 6), iv(lo, hi)])], outputs: vec![] };
    let consumer = JoinAggSpec { functions: vec![col(0, 2), col(2, 4), col(0, 2)] };
    let upstream = Upstream::Input { tiling: &tiling, sites: &stored };
    let p = preamble(&upstream, &consumer, 0, DType::BF16, &sites(&[0, 1, 2])).unwrap();
    assert_eq!(p.atoms.len(), 6);
    assert!(p.atoms.iter().all(|a| a.copies.len() == 1));
    let placed: Vec<String> = p.program.inputs.iter().map(|(a, i)| format!("{a}@{}", i.site)).collect();
    assert_eq!(placed, ["X1@2", "X2@2", "X3@0", "X4@0", "X5@1", "X6@1"]);
    let outs: Vec<String> = p.program.outputs.iter().map(|r| r.to_string()).collect();
    assert_eq!(
        outs,
        ["X1 @ S1", "X1 @ S3", "X2 @ S2", "X3 @ S1", "X3 @ S3", "X4 @ S2", "X5 @ S1", "X5 @ S3", "X6 @ S2"]
    );
    assert_eq!(p.copy(&atom("X4")).unwrap().holder, 1);
    assert_eq!(p.program.inputs[&atom("X1")].size_gb, 2.0 * 2.0 * 2.0 / 1e9);
    // Without a body nothing moves, and no site holds all of S1's atoms: invalid; the
    // naive gather fixes that.
    assert!(p.program.validate().is_err());
    let membership = Membership((0..3).map(|q| (part(&format!("S{}", q + 1)), BTreeSet::from([SiteId(q)]))).collect());
    assert!(naive(&p.program, &membership).validate_with(&membership).is_ok());
}

/// A random case: a tensor, a producer spec (grid blocks, each listed by 1 to 3 function
/// specs in random order, at random sites) and a consumer spec (grid blocks, some read by
/// several function specs, some dimensions read whole), on as many devices as the consumer
/// has function specs.
struct Case {
    producer: JoinAggSpec,
    placement: Vec<SiteId>,
    consumer: JoinAggSpec,
    devices: Vec<SiteId>,
}

fn random_cuts(rng: &mut Rng, extent: usize, max_parts: usize) -> Vec<Interval> {
    let parts = 1 + rng.below(max_parts.min(extent));
    let mut points: BTreeSet<usize> = BTreeSet::from([0, extent]);
    while points.len() < parts + 1 {
        points.insert(1 + rng.below(extent - 1));
    }
    let points: Vec<usize> = points.into_iter().collect();
    points.windows(2).map(|w| iv(w[0], w[1])).collect()
}

fn random_case(rng: &mut Rng) -> Case {
    let rank = 1 + rng.below(3);
    let extents: Vec<usize> = (0..rank).map(|_| 1 + rng.below(9)).collect();
    let grid = |rng: &mut Rng, budget: usize| -> Vec<TensorType> {
        let mut left = budget;
        let per_dim: Vec<Vec<Interval>> = extents
            .iter()
            .map(|&e| {
                let cuts = random_cuts(rng, e, left.max(1));
                left = (left / cuts.len()).max(1);
                cuts
            })
            .collect();
        combinations(&per_dim).into_iter().map(TensorType::from_intervals).collect()
    };

    // Consumer: at most 8 function specs, so that the device count stays small.
    let mut consumer_blocks = grid(rng, 4);
    if rng.chance(1, 3) {
        // Some specs read the whole tensor (a replicated input).
        consumer_blocks.push(TensorType::zero_bounded(&extents));
    }
    let mut reads: Vec<TensorType> = Vec::new();
    for b in &consumer_blocks {
        let copies = if reads.len() + consumer_blocks.len() < 8 && rng.chance(1, 3) { 2 } else { 1 };
        reads.extend(std::iter::repeat_n(b.clone(), copies));
    }
    reads.truncate(8);
    let n = reads.len();
    let devices: Vec<SiteId> = (0..n).map(SiteId).collect();

    // Producer: every block listed by 1..=3 function specs, shuffled, at random devices.
    let mut listed: Vec<TensorType> = Vec::new();
    for b in grid(rng, 6) {
        let m = 1 + rng.below(3);
        listed.extend(std::iter::repeat_n(b, m));
    }
    for i in (1..listed.len()).rev() {
        listed.swap(i, rng.below(i + 1));
    }
    let placement: Vec<SiteId> = listed.iter().map(|_| SiteId(rng.below(n))).collect();
    let producer = JoinAggSpec {
        functions: listed.into_iter().map(|b| FunctionSpec { inputs: vec![], outputs: vec![b] }).collect(),
    };
    let consumer = JoinAggSpec {
        functions: reads.into_iter().map(|b| FunctionSpec { inputs: vec![b.clone()], outputs: vec![b] }).collect(),
    };
    Case { producer, placement, consumer, devices }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn preambles_are_consistent_and_satisfiable(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let case = random_case(&mut rng);
        let upstream = Upstream::Spec { spec: &case.producer, output: 0, placement: &case.placement };
        let p = preamble(&upstream, &case.consumer, 0, DType::F32, &case.devices).unwrap();
        let prog = &p.program;
        prop_assert!(prog.check().is_ok(), "{prog}");
        prop_assert_eq!(parse(&prog.to_string()).ok(), Some(prog.clone()));

        // The atoms tile the tensor, and each consumer block is tiled by its atoms.
        let cells: Vec<TensorType> = p.atoms.iter().map(|a| a.block.clone()).collect();
        prop_assert!(check_tiling(&p.whole, &cells).is_ok());
        for (c, f) in p.consumers.iter().zip(&case.consumer.functions) {
            prop_assert_eq!(&c.block, &f.inputs[0]);
            let parts: Vec<TensorType> = c.atoms.iter().map(|&a| cells[a].clone()).collect();
            prop_assert!(check_tiling(&c.block, &parts).is_ok(), "{} is not tiled by {:?}", c.block, parts);
            // ... and no other atom meets it.
            for (a, cell) in cells.iter().enumerate() {
                prop_assert_eq!(c.atoms.contains(&a), cell.intersect(&c.block).is_some());
            }
        }

        // Every IN atom lies in exactly one producer block: the one its holder produced.
        let distinct = case.producer.output_blocks(0);
        let multiplicity: BTreeMap<TensorType, usize> = case.producer.output_multiplicities(0).into_iter().collect();
        prop_assert_eq!(prog.inputs.len(), p.copies.len());
        for (id, copy) in &p.copies {
            let cell = &cells[copy.atom];
            let holders: Vec<&TensorType> = distinct.iter().filter(|b| cell.is_projection_of(b)).collect();
            prop_assert_eq!(holders.len(), 1);
            prop_assert!(distinct.iter().filter(|b| cell.intersect(b).is_some()).count() == 1);
            prop_assert_eq!(holders[0], &case.producer.functions[copy.holder].outputs[0]);
            prop_assert_eq!(holders[0], &p.atoms[copy.atom].producer_block);
            prop_assert_eq!(prog.inputs[id].site, case.placement[copy.holder]);
            prop_assert_eq!(prog.inputs[id].size_gb, cell.volume() as f64 * 4.0 / 1e9);
        }

        // OUT: exactly the copies of one atom, as many as the producer block's multiplicity,
        // at the partition of every consumer spec that reads the atom.
        let mut expected = BTreeSet::new();
        for c in &p.consumers {
            for &a in &c.atoms {
                expected.insert((a, c.partition.clone()));
            }
        }
        let mut found = BTreeSet::new();
        for r in &prog.outputs {
            let atoms: BTreeSet<usize> = r.aggregate.atoms().iter().map(|id| p.copies[id].atom).collect();
            prop_assert_eq!(atoms.len(), 1, "{} mixes atoms", r);
            let a = *atoms.iter().next().unwrap();
            prop_assert_eq!(r.aggregate.len(), multiplicity[&p.atoms[a].producer_block]);
            prop_assert_eq!(Some(r.aggregate.clone()), p.aggregate(a));
            let Target::Partition(s) = &r.target else { panic!("{r} is not at a partition") };
            found.insert((a, s.clone()));
        }
        prop_assert_eq!(found, expected);

        // The naive gather (S_i on device i - 1) is valid, and every transfer in it is needed:
        // dropping one makes the program invalid.
        let membership = Membership(
            p.consumers.iter().zip(&case.devices).map(|(c, &d)| (c.partition.clone(), BTreeSet::from([d]))).collect(),
        );
        let gather = naive(prog, &membership);
        prop_assert!(gather.validate_with(&membership).is_ok(), "{gather}");
        if let Some(send) = gather.body.iter().find(|a| !a.is_local()) {
            let mut fewer = gather.clone();
            fewer.body.remove(&send.clone());
            prop_assert!(fewer.validate_with(&membership).is_err(), "{send} was not needed in\n{gather}");
        }
    }
}
