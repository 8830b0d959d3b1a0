//! parse ∘ print is the identity on random programs, and the parser never panics.

use std::collections::{BTreeMap, BTreeSet};

use einsum_exprog::{
    Action, Aggregate, AtomId, Input, PartitionId, PartitionSpec, Program, Requirement, SiteId, Target, load_valid,
    parse,
};
use proptest::prelude::*;

fn name() -> impl Strategy<Value = String> {
    // Any identifier, including ones that look like keywords or units.
    prop_oneof![
        "[A-Za-z_][A-Za-z0-9_]{0,4}",
        Just("IN".to_string()),
        Just("OUT".to_string()),
        Just("GPUS".to_string()),
        Just("size".to_string()),
        Just("GB".to_string()),
    ]
}

fn site() -> impl Strategy<Value = SiteId> {
    prop_oneof![0usize..8, Just(u32::MAX as usize)].prop_map(SiteId)
}

fn size() -> impl Strategy<Value = f64> {
    use proptest::num::f64::{NORMAL, POSITIVE, SUBNORMAL};
    prop_oneof![Just(1.0), 1e-6f64..1e3, POSITIVE | NORMAL | SUBNORMAL]
}

fn aggregate(atoms: Vec<AtomId>) -> impl Strategy<Value = Aggregate> {
    proptest::sample::subsequence(atoms.clone(), 1..=atoms.len()).prop_map(|s| Aggregate::new(s).unwrap())
}

fn target(partitions: Vec<PartitionId>) -> BoxedStrategy<Target> {
    if partitions.is_empty() {
        site().prop_map(Target::Site).boxed()
    } else {
        prop_oneof![site().prop_map(Target::Site), proptest::sample::select(partitions).prop_map(Target::Partition)]
            .boxed()
    }
}

fn program() -> impl Strategy<Value = Program> {
    let gpus = proptest::option::of(proptest::collection::btree_set(site(), 0..6));
    let partitions = proptest::collection::btree_map(
        name(),
        prop_oneof![
            (0usize..5).prop_map(PartitionSpec::Size),
            proptest::collection::btree_set(site(), 0..4).prop_map(PartitionSpec::Members)
        ],
        0..3,
    );
    let inputs = proptest::collection::btree_map(name(), (site(), size()), 1..6);
    (gpus, partitions, inputs).prop_flat_map(|(gpus, partitions, inputs)| {
        let atoms: Vec<AtomId> = inputs.keys().map(|n| AtomId::new(n).unwrap()).collect();
        let pnames: Vec<PartitionId> = partitions.keys().map(|n| PartitionId::new(n).unwrap()).collect();
        let outputs = proptest::collection::btree_set(
            (aggregate(atoms.clone()), target(pnames.clone())).prop_map(|(a, t)| Requirement::new(a, t)),
            0..4,
        );
        let actions = proptest::collection::btree_set(
            (aggregate(atoms), target(pnames), proptest::collection::btree_set(site(), 0..3))
                .prop_map(|(a, s, d)| Action::new(a, s, d)),
            0..8,
        );
        (Just(gpus), Just(partitions), Just(inputs), outputs, actions).prop_map(
            |(gpus, partitions, inputs, outputs, body)| Program {
                gpus,
                partitions: partitions
                    .into_iter()
                    .map(|(n, s)| (PartitionId::new(&n).unwrap(), s))
                    .collect::<BTreeMap<_, _>>(),
                inputs: inputs
                    .into_iter()
                    .map(|(n, (site, size_gb))| (AtomId::new(&n).unwrap(), Input { site, size_gb }))
                    .collect(),
                outputs,
                body,
            },
        )
    })
}

/// Fragments of the concrete syntax, glued at random: mostly near-miss programs.
fn soup() -> impl Strategy<Value = String> {
    let token = proptest::sample::select(vec![
        "GPUS:",
        "PARTITIONS:",
        "IN:",
        "OUT:",
        "A",
        "B",
        "G1",
        "size",
        "0",
        "1",
        "2",
        "7",
        "1.5",
        "1e-3",
        "GB",
        "MB",
        "@",
        "->",
        ",",
        ";",
        "+",
        ":",
        "{",
        "}",
        "(",
        ")",
        "\n",
        " ",
        "#c\n",
        "-",
        "é",
        "99999999999",
    ]);
    proptest::collection::vec(token, 0..40).prop_map(|t| t.join(" "))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn parse_print_is_identity(p in program()) {
        let text = p.to_string();
        let back = parse(&text);
        prop_assert_eq!(back.as_ref().ok(), Some(&p), "printed:\n{}\nerror: {:?}", text, back.as_ref().err());
    }

    #[test]
    fn parser_never_panics_and_round_trips_what_it_accepts(src in soup()) {
        if let Ok(p) = parse(&src) {
            prop_assert_eq!(parse(&p.to_string()).ok(), Some(p.clone()), "from:\n{}", src);
            let _ = load_valid(&src);
        }
    }

    #[test]
    fn arbitrary_text_never_panics(src in "\\PC{0,200}") {
        let _ = parse(&src);
        let _ = load_valid(&src);
    }
}

#[test]
fn empty_and_edge_programs_round_trip() {
    for src in ["", "GPUS:", "GPUS: 3\nPARTITIONS: G {}", "IN: A @ 0 (size: 1e-300 GB)", "OUT: A @ G"] {
        let p = parse(src).unwrap();
        assert_eq!(parse(&p.to_string()).unwrap(), p, "{src}");
    }
    let p = parse("GPUS:").unwrap();
    assert_eq!(p.gpus, Some(BTreeSet::new()));
}
