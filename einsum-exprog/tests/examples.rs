//! The programs of Section 5 (checked in under `examples/`) parse, check, and are valid; the
//! size-declared partitions of Example 5.3 resolve to the paper's placement.

use std::collections::BTreeSet;
use std::path::Path;

use einsum_exprog::{Error, Failure, Membership, PartitionId, Program, SiteId, ValidityError, load, load_valid, parse};

fn example(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn sites(s: &[usize]) -> BTreeSet<SiteId> {
    s.iter().map(|&i| SiteId(i)).collect()
}

fn part(name: &str) -> PartitionId {
    PartitionId::new(name).unwrap()
}

#[test]
fn every_example_parses_checks_and_round_trips() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut count = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "exprog") {
            let src = std::fs::read_to_string(&path).unwrap();
            let p = load(&src).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(parse(&p.to_string()).unwrap(), p, "{}", path.display());
            count += 1;
        }
    }
    assert_eq!(count, 5);
}

#[test]
fn example_5_1_swap_is_valid() {
    let (p, v) = load_valid(&example("example_5_1_swap.exprog")).unwrap();
    assert_eq!(p.body.len(), 4, "A+B @ 0, 1 is two local aggregations");
    assert!(p.gpus.is_none());
    assert_eq!(p.sites(), sites(&[0, 1]));
    assert_eq!(v.closure.firings().iter().map(|f| f.round).max(), Some(2));
}

#[test]
fn example_5_2_recursive_doubling_is_valid_in_three_rounds() {
    let (p, v) = load_valid(&example("example_5_2_recursive_doubling.exprog")).unwrap();
    assert_eq!(p.body.len(), 12);
    assert_eq!(v.closure.firings().iter().map(|f| f.round).max(), Some(3));
    // Every action fires once: the firing order lists the whole body.
    assert_eq!(v.closure.firing_order().len(), 12);
}

#[test]
fn example_5_3_finds_the_papers_placement() {
    let (p, v) = load_valid(&example("example_5_3_v100_placement.exprog")).unwrap();
    assert!(p.has_size_partitions());
    assert_eq!(v.membership.sites(&part("G1")), Some(&sites(&[0, 1, 4, 5])));
    assert_eq!(v.membership.sites(&part("G2")), Some(&sites(&[2, 3, 6, 7])));
    // With that membership fixed the program is the explicit one, and valid too.
    let explicit = load(&example("explicit_partitions.exprog")).unwrap();
    assert_eq!(p.resolve(&v.membership).partitions, explicit.partitions);
    assert!(explicit.validate_with(&v.membership).is_ok());
    // A wrong membership fails, naming the unmet requirement.
    let mut wrong = Membership::default();
    wrong.0.insert(part("G1"), sites(&[0, 1, 2, 3]));
    wrong.0.insert(part("G2"), sites(&[4, 5, 6, 7]));
    match p.validate_with(&wrong) {
        Err(ValidityError::Invalid(invalid)) => {
            assert!(matches!(invalid.failure, Failure::NotEnabled { .. } | Failure::MissingOutput { .. }));
            assert_eq!(invalid.membership, wrong);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn example_5_4_preamble_checks_but_needs_a_body() {
    let src = example("example_5_4_preamble.exprog");
    let p = load(&src).unwrap();
    assert_eq!(p.partitions.len(), 4);
    assert_eq!(p.inputs.len(), 8);
    assert_eq!(p.outputs.len(), 4);
    assert!(p.body.is_empty());
    // Without a body no OUT requirement is met: the error names the OUT line.
    let err = load_valid(&src).unwrap_err().to_string();
    assert!(err.starts_with("line 7, column 6: OUT requirement X1+Y1 @ S1 is not met"), "{err}");
    // A body that gathers each pair at one of its two holders: the search places S1..S4.
    let body = "X1 @ 0 -> 1\nY2 @ 1 -> 0\nX3 @ 2 -> 3\nY4 @ 3 -> 2\nX1+Y1 @ S1; X2+Y2 @ S2; X3+Y3 @ S3; X4+Y4 @ S4\n";
    let (q, v) = load_valid(&format!("{src}{body}")).unwrap();
    assert_eq!(v.membership.sites(&part("S1")), Some(&sites(&[1])));
    assert_eq!(v.membership.sites(&part("S2")), Some(&sites(&[0])));
    assert_eq!(v.membership.sites(&part("S3")), Some(&sites(&[3])));
    assert_eq!(v.membership.sites(&part("S4")), Some(&sites(&[2])));
    // Gathering two pairs at site 1 cannot work with single-site partitions.
    let clash = "X1 @ 0 -> 1\nX2 @ 0 -> 1\nX3 @ 2 -> 3\nY4 @ 3 -> 2\nX1+Y1 @ S1; X2+Y2 @ S2; X3+Y3 @ S3; X4+Y4 @ S4\n";
    assert!(load_valid(&format!("{src}{clash}")).is_err());
    assert_eq!(q.body.len(), 8);
}

#[test]
fn malformed_programs_name_the_line() {
    let cases: &[(&str, &str)] = &[
        ("IN: A @ 0\nOUT: A @ 1\nA @ 0 1", "line 3, column 7: expected ';' or a new line after an action"),
        ("GPUS: 0, 1\nIN: A @ 0\nA @ 0 -> 5", "line 3, column 1: action A @ 0 -> 5: site 5 is not declared in GPUS"),
        ("IN: A @ 0\nOUT: A @ 1\nA+Q @ 0 -> 1", "line 3, column 1: action A+Q @ 0 -> 1: atom Q is not declared in IN"),
        ("IN: A @ 0; B @ 1\nOUT: A+B @ 1\nA @ 0 -> 1", "line 2, column 6: OUT requirement A+B @ 1 is not met"),
        (
            "IN: A @ 0\nOUT: A @ 1\nA @ 0 -> 1\nA @ 2 -> 1",
            "line 4, column 1: action A @ 2 -> 1 is never enabled at site 2",
        ),
    ];
    for (src, want) in cases {
        let got = match load_valid(src) {
            Ok(_) => panic!("accepted:\n{src}"),
            Err(e @ (Error::Parse(_) | Error::Check(_) | Error::Invalid(_))) => e.to_string(),
        };
        assert!(got.starts_with(want), "\n got: {got}\nwant: {want}");
    }
}

#[test]
fn unsatisfiable_size_partitions_report_the_best_attempt() {
    // G needs A+B at both its sites, but only site 1 ever gets it.
    let src = "GPUS: 0, 1, 2\nPARTITIONS: G {size 2} H {size 1}\nIN: A @ 0; B @ 1\nOUT: A+B @ G\nA @ 0 -> 1\nA+B @ 1\n";
    let err = load_valid(src).unwrap_err().to_string();
    assert!(err.contains("OUT requirement A+B @ G is not met"), "{err}");
    assert!(err.contains("with G = {"), "{err}");
}

#[test]
fn program_equality_is_set_equality() {
    let a: Program = "IN: A @ 0; B @ 1\nA @ 0 -> 1, 2\nB @ 1 -> 0\nB @ 1 -> 0".parse().unwrap();
    let b: Program = "IN: B @ 1; A @ 0\nB @ 1 -> 0; A @ 0 -> 2, 1".parse().unwrap();
    assert_eq!(a, b);
}

#[test]
fn programs_without_out_are_refused_not_vacuously_valid() {
    let cases: &[(&str, &str)] = &[
        ("", "line 1, column 1: the program is empty"),
        ("# only a comment\n\n", "the program is empty"),
        ("IN: A @ 0", "line 1, column 10: the program has no OUT section"),
        ("IN: A @ 0; B @ 1\nA @ 0 -> 1", "line 2, column 11: the program has no OUT section"),
    ];
    for (src, want) in cases {
        for got in [load(src).map(|_| ()), load_valid(src).map(|_| ())] {
            let got = got.map_or_else(|e| e.to_string(), |()| panic!("accepted:\n{src}"));
            assert!(got.contains(want), "\n got: {got}\nwant: {want}");
        }
    }
}
