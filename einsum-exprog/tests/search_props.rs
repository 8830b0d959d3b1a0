//! The pruned membership search agrees with brute force: a program with partitions declared
//! by size is valid iff some membership makes it valid.

mod common;

use std::collections::BTreeSet;

use common::{Chance, Partitions, Rng, random_valid_program};
use einsum_exprog::{Membership, PartitionSpec, Program, SiteId};
use proptest::prelude::*;

/// Every membership of the sized partitions over the sites the explicit ones leave free.
fn all_memberships(p: &Program) -> Vec<Membership> {
    let declared = p.declared_membership();
    let taken: BTreeSet<SiteId> = declared.0.values().flatten().copied().collect();
    let pool: Vec<SiteId> = p.sites().difference(&taken).copied().collect();
    let mut out = vec![declared];
    for (name, spec) in &p.partitions {
        let PartitionSpec::Size(k) = spec else { continue };
        let mut next = Vec::new();
        for m in &out {
            let used: BTreeSet<SiteId> = m.0.values().flatten().copied().collect();
            let free: Vec<SiteId> = pool.iter().copied().filter(|s| !used.contains(s)).collect();
            for mask in 0u32..(1 << free.len()) {
                if mask.count_ones() as usize == *k {
                    let mut m = m.clone();
                    m.0.insert(
                        name.clone(),
                        (0..free.len()).filter(|i| mask & (1 << i) != 0).map(|i| free[i]).collect(),
                    );
                    next.push(m);
                }
            }
        }
        out = next;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn search_agrees_with_brute_force(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let mut p = random_valid_program(&mut rng, Partitions::Any, 4);
        // Drop a random action without any guard: often invalid now.
        if !p.body.is_empty() && rng.chance(2, 3) {
            let victim = p.body.iter().nth(rng.below(p.body.len())).cloned().unwrap();
            p.body.remove(&victim);
        }
        let brute = all_memberships(&p).iter().any(|m| p.validate_with(m).is_ok());
        let searched = p.validate();
        prop_assert_eq!(searched.is_ok(), brute, "{}\n{:?}", p, searched.err());
        if let Ok(v) = searched {
            prop_assert!(p.validate_with(&v.membership).is_ok());
        }
        let brute_wf = all_memberships(&p).iter().any(|m| p.well_formed_with(m).is_ok());
        prop_assert_eq!(p.well_formed().is_ok(), brute_wf);
    }
}
