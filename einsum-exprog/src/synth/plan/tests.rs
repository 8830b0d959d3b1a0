//! The plans' unit tests.

use einsum_sim::Topology;

use super::*;
use crate::action::Action;

fn s(i: usize) -> SiteId {
    SiteId(i)
}

fn all(n: usize) -> BTreeSet<SiteId> {
    (0..n).map(SiteId).collect()
}

/// On dgx-v100 site 1 hangs under the root 0 (they share NVLinks) until a load on that
/// route makes a relay cheaper; unloaded trees come from the cache, which a loaded tree
/// neither reads nor overwrites.
#[test]
fn load_moves_the_fastest_tree_and_unloaded_trees_are_cached() {
    let v100 = Topology::preset("dgx-v100").unwrap();
    let m = SiteRoutes::new(&all(8), &v100);
    let spread = m.tree(s(0), false, 0, &Load::new(), 1e6);
    assert_eq!(spread.get(&s(1)), Some(&s(0)));
    assert_eq!(spread.len(), 7);
    assert_eq!(m.unloaded.borrow().len(), 1);
    let mut load = Load::new();
    m.add_load(&mut load, s(0), s(1), 1e12);
    let loaded = m.tree(s(0), false, 0, &load, 1e6);
    assert!(loaded.get(&s(1)).is_some_and(|p| *p != s(0)), "{loaded:?}");
    assert_eq!(m.unloaded.borrow().len(), 1);
    assert_eq!(m.tree(s(0), false, 0, &Load::new(), 1e6), spread);
    // A cold machine builds the same tree the cache serves, for a salted tree too.
    let salted = m.tree(s(3), true, 7, &Load::new(), 1e6);
    assert_eq!(m.tree(s(3), true, 7, &Load::new(), 1e6), salted);
    assert_eq!(SiteRoutes::new(&all(8), &v100).tree(s(3), true, 7, &Load::new(), 1e6), salted);
    assert_eq!(m.unloaded.borrow().len(), 2);
}

/// Stopping Dijkstra once every parent is final builds the tree the full run builds, on
/// machines whose fastest trees are stars (switched) and on ones where they relay
/// (dgx-v100), loaded and salted.
#[test]
fn trees_stopped_early_equal_the_full_dijkstra() {
    let mut checked = 0;
    for (name, n) in [("dgx-v100", 8), ("dgx-h100x3", 24), ("nvl72", 72)] {
        let t = Topology::preset(name).unwrap();
        let m = SiteRoutes::new(&all(n), &t);
        let mut load = Load::new();
        for step in 0..40u64 {
            let (a, b) = (s((step * 7 % n as u64) as usize), s((step * 5 % n as u64 + 1) as usize % n));
            if a != b {
                m.add_load(&mut load, a, b, 1e6 * (step % 3) as f64);
            }
            for root in [0, 3, n - 1] {
                for inbound in [false, true] {
                    let salt = step % 4;
                    let cut = m.dijkstra(s(root), inbound, salt, &load, 2e6, true);
                    let full = m.dijkstra(s(root), inbound, salt, &load, 2e6, false);
                    assert_eq!(cut, full, "{name}: root {root}, inbound {inbound}, step {step}");
                    assert_eq!(cut.len(), n - 1);
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 3 * 40 * 3 * 2);
}

#[test]
fn v100_rings_use_only_nvlink() {
    let v100 = Topology::preset("dgx-v100").unwrap();
    let m = SiteRoutes::new(&all(8), &v100);
    assert!(!m.uniform);
    assert_eq!(m.orders.len(), 5);
    let best = &m.orders[1];
    for (a, b) in best.iter().zip(best.iter().cycle().skip(1)) {
        assert_eq!(m.bandwidth(*a, *b), 50e9, "{best:?}");
    }
    let second = &m.orders[3];
    for (a, b) in second.iter().zip(second.iter().cycle().skip(1)) {
        assert_eq!(m.bandwidth(*a, *b), 25e9, "{second:?}");
    }
    // 0 and 5 are unlinked: relay through a site linked to both
    let w = m.relay(s(0), s(5)).unwrap();
    assert!(v100.linked(s(0), w) && v100.linked(w, s(5)));
    assert_eq!(m.relay(s(0), s(4)), None);
    let a100 = SiteRoutes::new(&all(8), &Topology::preset("dgx-a100").unwrap());
    assert!(a100.uniform);
    assert_eq!(a100.orders[0], all(8).into_iter().collect::<Vec<_>>());
    assert_eq!(a100.relay(s(0), s(5)), None);
}

fn group(src: &str) -> (Program, Vec<Group>) {
    let p: Program = src.parse().unwrap();
    let g = groups(&p, &p.declared_membership()).unwrap();
    (p, g)
}

fn valid(p: &Program, acts: Vec<Action>) -> Program {
    let q = p.with_body(acts);
    q.validate_with(&q.declared_membership()).unwrap_or_else(|e| panic!("{e}\n{q}"));
    q
}

#[test]
fn every_shape_builds_a_valid_program() {
    let (p, groups) =
        group("GPUS: 0, 1, 2, 3, 4\nIN: A @ 0; B @ 1; C @ 2; D @ 2; E @ 4\nOUT: A+B+C+D+E @ 0, 1, 3; E @ 0, 2, 3");
    let m = SiteRoutes::new(&p.sites(), &Topology::preset("dgx-v100").unwrap());
    for order in 0..m.orders.len() {
        for reduce in SHAPES {
            for spread in SHAPES {
                for root in 0..5 {
                    for relay in [false, true] {
                        let plan = Plan {
                            kind: Kind::Rooted { root: s(root), reduce, spread },
                            order,
                            relay,
                            salt: root as u64,
                        };
                        let acts: Vec<Action> = groups.iter().flat_map(|g| build(g, &plan, &m)).collect();
                        valid(&p, acts);
                    }
                }
            }
        }
        let plan = Plan { kind: Kind::Butterfly, order, relay: false, salt: 0 };
        valid(&p, groups.iter().flat_map(|g| build(g, &plan, &m)).collect());
    }
}

#[test]
fn butterfly_is_example_5_2() {
    let (p, groups) = group("IN: A @ 0; B @ 1; C @ 2; D @ 3\nOUT: A+B+C+D @ 0, 1, 2, 3");
    assert!(groups[0].butterfly_applies());
    let m = SiteRoutes::new(&p.sites(), &Topology::preset("dgx-h100").unwrap());
    let plan = Plan { kind: Kind::Butterfly, order: 0, relay: false, salt: 0 };
    let q = valid(&p, build(&groups[0], &plan, &m));
    let expected: Program =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/example_5_2_recursive_doubling.exprog"))
            .unwrap()
            .parse()
            .unwrap();
    assert_eq!(q.body, expected.body);
}

#[test]
fn chains_follow_the_ring() {
    let (p, groups) = group("IN: A @ 0; B @ 1; C @ 2; D @ 3\nOUT: A+B+C+D @ 0, 1, 2, 3");
    let m = SiteRoutes::new(&p.sites(), &Topology::preset("dgx-h100").unwrap());
    let plan = Plan {
        kind: Kind::Rooted { root: s(1), reduce: Shape::Chain, spread: Shape::Chain },
        order: 0,
        relay: false,
        salt: 0,
    };
    let q = valid(&p, build(&groups[0], &plan, &m));
    let text: Vec<String> = q.body.iter().map(ToString::to_string).collect();
    assert_eq!(
        text,
        ["C @ 2 -> 3", "C+D @ 3 -> 0", "A+C+D @ 0 -> 1", "A+B+C+D @ 1 -> 2", "A+B+C+D @ 2 -> 3", "A+B+C+D @ 3 -> 0"]
    );
}
