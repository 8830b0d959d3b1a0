//! Rewrite rules as "start => goal" cases, egg style: each case names a start program, the
//! rule applied (with `p` bound to the start), and either the goal body (the preamble is the
//! start's) or the refusal expected.

use std::collections::BTreeSet;

use einsum_exprog::rewrite::{
    Refusal, delete, eliminate_relay, fission, fusion, insert, introduce_relay, pullup, pushdown, substitute_source,
};
use einsum_exprog::{Action, Aggregate, Program, SiteId};

fn program(src: &str) -> Program {
    src.parse().unwrap_or_else(|e| panic!("{e}\n{src}"))
}

fn act(src: &str) -> Action {
    src.parse().unwrap()
}

fn agg(src: &str) -> Aggregate {
    src.parse().unwrap()
}

fn sites(s: &[usize]) -> BTreeSet<SiteId> {
    s.iter().map(|&i| SiteId(i)).collect()
}

macro_rules! rewrite_cases {
    ($($name:ident: $start:expr, |$p:ident| $rule:expr => $kind:ident($($goal:tt)*);)*) => {$(
        #[test]
        fn $name() {
            let $p = program($start);
            assert!($p.validate().is_ok(), "start is not valid:\n{}", $p);
            rewrite_cases!(@check $p, $rule, $kind($($goal)*));
        }
    )*};
    (@check $p:ident, $rule:expr, Goal($body:expr)) => {{
        let got = $rule.unwrap_or_else(|r| panic!("refused: {r}"));
        let want = $p.with_body(program($body).body);
        assert_eq!(got, want, "\n got:\n{got}\nwant:\n{want}");
        assert!(got.validate().is_ok());
    }};
    (@check $p:ident, $rule:expr, Refused($pat:pat)) => {{
        let result = $rule;
        assert!(matches!(result, Err($pat)), "expected a refusal, got {result:?}");
    }};
}

const SWAP3: &str = "GPUS: 0, 1, 2, 3\nIN: A @ 0\nOUT: A @ 1, 2\n";

rewrite_cases! {
    fission_splits_a_multicast:
        &format!("{SWAP3}A @ 0 -> 1, 2"), |p| fission(&p, &act("A @ 0 -> 1, 2"), &sites(&[1]))
        => Goal("A @ 0 -> 1\nA @ 0 -> 2");
    fission_needs_a_proper_subset:
        &format!("{SWAP3}A @ 0 -> 1, 2"), |p| fission(&p, &act("A @ 0 -> 1, 2"), &sites(&[1, 2]))
        => Refused(Refusal::NotApplicable(_));
    fission_of_a_missing_action:
        &format!("{SWAP3}A @ 0 -> 1, 2"), |p| fission(&p, &act("A @ 0 -> 1, 3"), &sites(&[1]))
        => Refused(Refusal::NotInProgram(_));
    fusion_merges_a_multicast:
        &format!("{SWAP3}A @ 0 -> 1\nA @ 0 -> 2"), |p| fusion(&p, &act("A @ 0 -> 1"), &act("A @ 0 -> 2"))
        => Goal("A @ 0 -> 1, 2");
    fusion_absorbs_a_local_aggregation:
        &format!("{SWAP3}A @ 0 -> 1, 2\nA @ 0"), |p| fusion(&p, &act("A @ 0"), &act("A @ 0 -> 1, 2"))
        => Goal("A @ 0 -> 1, 2");
    fusion_needs_the_same_source:
        &format!("{SWAP3}A @ 0 -> 1\nA @ 1 -> 2"), |p| fusion(&p, &act("A @ 0 -> 1"), &act("A @ 1 -> 2"))
        => Refused(Refusal::NotApplicable(_));
    relay_introduction:
        &format!("{SWAP3}A @ 0 -> 1, 2"), |p| introduce_relay(&p, &act("A @ 0 -> 1, 2"), SiteId(2), SiteId(3))
        => Goal("A @ 0 -> 1, 3\nA @ 3 -> 2");
    relay_through_an_existing_destination:
        &format!("{SWAP3}A @ 0 -> 1, 2"), |p| introduce_relay(&p, &act("A @ 0 -> 1, 2"), SiteId(2), SiteId(1))
        => Goal("A @ 0 -> 1\nA @ 1 -> 2");
    relay_must_be_declared:
        &format!("{SWAP3}A @ 0 -> 1, 2"), |p| introduce_relay(&p, &act("A @ 0 -> 1, 2"), SiteId(2), SiteId(9))
        => Refused(Refusal::NotApplicable(_));
    relay_elimination:
        &format!("{SWAP3}A @ 0 -> 1, 3\nA @ 3 -> 2"), |p| eliminate_relay(&p, &act("A @ 0 -> 1, 3"), &act("A @ 3 -> 2"), SiteId(2))
        => Goal("A @ 0 -> 1, 2");
    relay_elimination_keeps_a_required_relay:
        &format!("{SWAP3}A @ 0 -> 1\nA @ 1 -> 2"), |p| eliminate_relay(&p, &act("A @ 0 -> 1"), &act("A @ 1 -> 2"), SiteId(2))
        => Refused(Refusal::WouldBeInvalid(_));
    relay_elimination_keeps_a_relay_that_feeds_others:
        "GPUS: 0, 1, 2, 3\nIN: A @ 0\nOUT: A @ 2, 3\nA @ 0 -> 1\nA @ 1 -> 2, 3",
        |p| eliminate_relay(&p, &act("A @ 0 -> 1"), &act("A @ 1 -> 2, 3"), SiteId(2))
        => Refused(Refusal::WouldBeInvalid(_));
    pushdown_sends_the_sum:
        "IN: A @ 0; B @ 0\nOUT: A+B @ 1\nA @ 0 -> 1\nB @ 0 -> 1\nA+B @ 1",
        |p| pushdown(&p, &act("A @ 0 -> 1"), &act("B @ 0 -> 1"), SiteId(1))
        => Goal("A+B @ 0 -> 1\nA+B @ 1");
    pushdown_is_guarded_by_out:
        "IN: A @ 0; B @ 0\nOUT: A+B @ 1; A @ 1\nA @ 0 -> 1\nB @ 0 -> 1\nA+B @ 1",
        |p| pushdown(&p, &act("A @ 0 -> 1"), &act("B @ 0 -> 1"), SiteId(1))
        => Refused(Refusal::WouldBeInvalid(_));
    pushdown_needs_disjoint_aggregates:
        "IN: A @ 0; B @ 0\nOUT: A+B @ 1\nA @ 0 -> 1\nA+B @ 0 -> 1",
        |p| pushdown(&p, &act("A @ 0 -> 1"), &act("A+B @ 0 -> 1"), SiteId(1))
        => Refused(Refusal::NotApplicable(_));
    pullup_sends_the_parts:
        "IN: A @ 0; B @ 0\nOUT: A+B @ 1\nA+B @ 0 -> 1\nA+B @ 1",
        |p| pullup(&p, &act("A+B @ 0 -> 1"), SiteId(1), &agg("A"), false)
        => Goal("A @ 0 -> 1\nB @ 0 -> 1\nA+B @ 1");
    pullup_without_restore_loses_the_sum:
        "IN: A @ 0; B @ 0\nOUT: A+B @ 1\nA+B @ 0 -> 1",
        |p| pullup(&p, &act("A+B @ 0 -> 1"), SiteId(1), &agg("A"), false)
        => Refused(Refusal::WouldBeInvalid(_));
    pullup_with_restore_reforms_the_sum:
        "IN: A @ 0; B @ 0\nOUT: A+B @ 1\nA+B @ 0 -> 1",
        |p| pullup(&p, &act("A+B @ 0 -> 1"), SiteId(1), &agg("A"), true)
        => Goal("A @ 0 -> 1\nB @ 0 -> 1\nA+B @ 1");
    pullup_needs_formable_parts:
        "IN: A @ 0; B @ 2; C @ 2\nOUT: A+B+C @ 3\nB+C @ 2 -> 1\nA @ 0 -> 1\nA+B+C @ 1 -> 3",
        |p| pullup(&p, &act("A+B+C @ 1 -> 3"), SiteId(3), &agg("A+B"), true)
        => Refused(Refusal::WouldBeInvalid(_));
    pullup_needs_a_proper_part:
        "IN: A @ 0; B @ 0\nOUT: A+B @ 1\nA+B @ 0 -> 1",
        |p| pullup(&p, &act("A+B @ 0 -> 1"), SiteId(1), &agg("A+B"), true)
        => Refused(Refusal::NotApplicable(_));
    source_substitution:
        &format!("{SWAP3}A @ 0 -> 1, 2"), |p| substitute_source(&p, &act("A @ 0 -> 1, 2"), SiteId(2), SiteId(1))
        => Goal("A @ 0 -> 1\nA @ 1 -> 2");
    source_substitution_needs_the_aggregate_there:
        &format!("{SWAP3}A @ 0 -> 1, 2"), |p| substitute_source(&p, &act("A @ 0 -> 1, 2"), SiteId(2), SiteId(3))
        => Refused(Refusal::NotApplicable(_));
    source_substitution_cannot_draw_on_its_own_output:
        &format!("{SWAP3}A @ 0 -> 1\nA @ 1 -> 2"), |p| substitute_source(&p, &act("A @ 0 -> 1"), SiteId(1), SiteId(2))
        => Refused(Refusal::WouldBeInvalid(_));
    insert_a_well_formed_action:
        &format!("{SWAP3}A @ 0 -> 1, 2"), |p| insert(&p, act("A @ 1 -> 3"))
        => Goal("A @ 0 -> 1, 2\nA @ 1 -> 3");
    insert_refuses_an_ill_formed_action:
        &format!("{SWAP3}A @ 0 -> 1, 2"), |p| insert(&p, act("A @ 3 -> 1"))
        => Refused(Refusal::WouldBeIllFormed(_));
    insert_refuses_a_present_action:
        &format!("{SWAP3}A @ 0 -> 1, 2"), |p| insert(&p, act("A @ 0 -> 1, 2"))
        => Refused(Refusal::AlreadyPresent(_));
    delete_a_redundant_action:
        &format!("{SWAP3}A @ 0 -> 1, 2\nA @ 1 -> 3"), |p| delete(&p, &act("A @ 1 -> 3"))
        => Goal("A @ 0 -> 1, 2");
    delete_refuses_a_needed_action:
        &format!("{SWAP3}A @ 0 -> 1, 2"), |p| delete(&p, &act("A @ 0 -> 1, 2"))
        => Refused(Refusal::WouldBeInvalid(_));
    partition_programs_rewrite_too:
        "GPUS: 0, 1, 2, 3\nPARTITIONS: G {size 2} H {size 2}\nIN: A @ 0; B @ 1\nOUT: A+B @ G\nA @ 0 -> 1, 2\nB @ 1 -> 2\nA+B @ G",
        |p| introduce_relay(&p, &act("A @ 0 -> 1, 2"), SiteId(2), SiteId(3))
        => Goal("A @ 0 -> 1, 3\nA @ 3 -> 2\nB @ 1 -> 2\nA+B @ G");
}

#[test]
fn refusals_explain_themselves() {
    let p = program(&format!("{SWAP3}A @ 0 -> 1\nA @ 1 -> 2"));
    let r = eliminate_relay(&p, &act("A @ 0 -> 1"), &act("A @ 1 -> 2"), SiteId(2)).unwrap_err();
    assert_eq!(
        r.to_string(),
        "the result would not be valid: OUT requirement A @ 1 is not met: A never reaches site 1"
    );
}
