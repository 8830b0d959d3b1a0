//! The closure `S*(P)` of Definition 5.5, computed in rounds, with the firing order and the
//! dependency structure a simulator or a task-graph lowering needs.
//!
//! Round 0 is `S_IN`. In round `r ≥ 1`, every action instance (an action at one of its
//! source sites) that the state after round `r - 1` enables and that has not fired yet fires;
//! its materialisations join the state with round `r`. The loop stops when a round fires
//! nothing; the state is then the least fixed point `S*(P)` (firing is monotone, so the order
//! of firing does not matter for the final state, only for the recorded structure).
//!
//! For every firing we record one enabling set: the aggregate itself if it is already
//! materialised at the source, otherwise the first exact cover found when candidates are
//! tried largest first (fewest pieces to read), then earliest materialised. Every piece of an enabling set was materialised in an
//! earlier round, so the firings with their pieces' producers form a DAG.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::OnceLock;

use crate::action::Action;
use crate::aggregate::Aggregate;
use crate::atomset::AtomSet;
use crate::cover::exact_cover;
use crate::ids::{AtomId, SiteId};
use crate::membership::Membership;
use crate::program::Program;
use crate::validity::ValidityError;

/// Steps the exact-cover searches of one closure may take before giving up.
const COVER_BUDGET: u64 = 20_000_000;

/// What materialised an aggregate at a site first.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Producer {
    /// The `IN` declaration of this atom.
    Input(AtomId),
    /// The firing with this index in [`Closure::firings`] (as the local aggregation if the
    /// site is the firing's site, as the arrival of its transfer otherwise).
    Firing(usize),
}

/// One aggregate present at one site in the closure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Materialization {
    /// The aggregate.
    pub aggregate: Aggregate,
    /// Where.
    pub site: SiteId,
    /// The round in which it first appeared (0: `IN`).
    pub round: usize,
    /// What produced it first (ties within a round go to the earlier firing).
    pub producer: Producer,
}

/// One action firing at one site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Firing {
    /// The action (its source may be a partition; `site` says which member).
    pub action: Action,
    /// The site where the aggregate was formed.
    pub site: SiteId,
    /// The round in which it fired (from 1).
    pub round: usize,
    /// The enabling set: indices into [`Closure::materializations`] of pieces at `site` that
    /// partition the aggregate (one piece, the aggregate itself, if it was already there).
    pub pieces: Vec<usize>,
}

/// `S*(P)` under one membership, with the firings that built it.
#[derive(Clone, Debug, Default)]
pub struct Closure {
    materializations: Vec<Materialization>,
    /// Every atom of the program, numbered: the bit of each atom in an [`AtomSet`].
    universe: BTreeMap<AtomId, usize>,
    /// The materialisation of each aggregate (as its atom set) at each site. Keyed by bit
    /// set rather than by [`Aggregate`] so that neither building nor querying the closure
    /// clones or hashes the atoms' names.
    known: HashMap<SiteId, HashMap<AtomSet, usize>>,
    /// The same index by aggregate, built on the first [`Closure::by_aggregate`] (by a
    /// lowering, which looks up every materialisation; a shared closure builds it once).
    by_aggregate: OnceLock<HashMap<SiteId, HashMap<Aggregate, usize>>>,
    firings: Vec<Firing>,
    not_enabled: Vec<(Action, SiteId)>,
}

impl Closure {
    /// Whether `(aggregate, site)` is in the closure.
    pub fn contains(&self, aggregate: &Aggregate, site: SiteId) -> bool {
        self.index_of(aggregate, site).is_some()
    }

    /// The index in [`Closure::materializations`] of `aggregate` at `site`, if any.
    pub fn index_of(&self, aggregate: &Aggregate, site: SiteId) -> Option<usize> {
        let at = self.known.get(&site)?;
        let mut set = AtomSet::empty();
        for a in aggregate.atoms() {
            set.insert(*self.universe.get(a)?);
        }
        at.get(&set).copied()
    }

    /// The index of every materialisation by site and aggregate: for callers that look up
    /// many (a lowering); built once per closure, on first use.
    pub fn by_aggregate(&self) -> &HashMap<SiteId, HashMap<Aggregate, usize>> {
        self.by_aggregate.get_or_init(|| {
            let mut index: HashMap<SiteId, HashMap<Aggregate, usize>> = HashMap::new();
            for (i, m) in self.materializations.iter().enumerate() {
                index.entry(m.site).or_default().insert(m.aggregate.clone(), i);
            }
            index
        })
    }

    /// The materialisation of `aggregate` at `site`, if any.
    pub fn materialization(&self, aggregate: &Aggregate, site: SiteId) -> Option<&Materialization> {
        self.index_of(aggregate, site).map(|i| &self.materializations[i])
    }

    /// Every materialisation, in the order they appeared (round by round).
    pub fn materializations(&self) -> &[Materialization] {
        &self.materializations
    }

    /// The aggregates present at `site`.
    pub fn aggregates_at(&self, site: SiteId) -> impl Iterator<Item = &Aggregate> {
        self.materializations.iter().filter(move |m| m.site == site).map(|m| &m.aggregate)
    }

    /// Every firing in firing order: by round, then body order, then site.
    pub fn firings(&self) -> &[Firing] {
        &self.firings
    }

    /// The action instances the closure never enables (empty iff the program is well-formed).
    pub fn not_enabled(&self) -> &[(Action, SiteId)] {
        &self.not_enabled
    }

    /// Whether every action instance is enabled by the closure (Definition 5.5).
    pub fn is_well_formed(&self) -> bool {
        self.not_enabled.is_empty()
    }

    /// The firings that produced the enabling pieces of firing `firing` (pieces from `IN`
    /// have no producing firing). These are the edges of the task DAG.
    pub fn dependencies(&self, firing: usize) -> Vec<usize> {
        let mut deps: Vec<usize> = self
            .firings
            .get(firing)
            .into_iter()
            .flat_map(|f| &f.pieces)
            .filter_map(|&m| match self.materializations[m].producer {
                Producer::Firing(i) => Some(i),
                Producer::Input(_) => None,
            })
            .collect();
        deps.sort_unstable();
        deps.dedup();
        deps
    }

    /// The distinct actions in the order of their first firing (a firing order of the
    /// program when every action has a site source).
    pub fn firing_order(&self) -> Vec<&Action> {
        let mut seen = BTreeSet::new();
        self.firings.iter().filter(|f| seen.insert(&f.action)).map(|f| &f.action).collect()
    }

    /// The round in which `action` last fired at any site, if it fired.
    pub fn last_round(&self, action: &Action) -> Option<usize> {
        self.firings.iter().filter(|f| &f.action == action).map(|f| f.round).max()
    }
}

struct Instance<'a> {
    action: &'a Action,
    site: SiteId,
    set: AtomSet,
}

impl Program {
    /// The closure `S*(P)` under `membership` (which must give the sites of every partition
    /// an action fires at; see [`Program::validate`] to search memberships).
    pub fn closure(&self, membership: &Membership) -> Result<Closure, ValidityError> {
        // Program::atoms's set, gathered by reference so that each name is cloned once.
        let mut names: BTreeSet<&AtomId> = self.inputs.keys().collect();
        names.extend(self.outputs.iter().flat_map(|r| r.aggregate.atoms()));
        names.extend(self.body.iter().flat_map(|a| a.aggregate.atoms()));
        let universe: BTreeMap<AtomId, usize> = names.into_iter().enumerate().map(|(i, a)| (a.clone(), i)).collect();
        let to_set = |agg: &Aggregate| {
            let mut s = AtomSet::empty();
            for a in agg.atoms() {
                if let Some(&i) = universe.get(a) {
                    s.insert(i);
                }
            }
            s
        };

        let mut instances = Vec::new();
        for action in &self.body {
            let sites = membership
                .resolve(&action.source)
                .ok_or_else(|| ValidityError::UnknownPartition(action.source.to_string()))?;
            let set = to_set(&action.aggregate);
            for site in sites {
                instances.push(Instance { action, site, set: set.clone() });
            }
        }

        let mut st = State::default();
        for (atom, input) in &self.inputs {
            let agg = Aggregate::atom(atom.clone());
            let set = to_set(&agg);
            st.add(&agg, &set, input.site, 0, Producer::Input(atom.clone()));
        }
        st.dirty.extend(instances.iter().map(|i| i.site));

        let mut pending: Vec<usize> = (0..instances.len()).collect();
        let mut budget = COVER_BUDGET;
        let mut round = 0;
        loop {
            round += 1;
            let mut fired: Vec<(usize, Vec<usize>)> = Vec::new();
            for &i in &pending {
                let inst = &instances[i];
                if !st.dirty.contains(&inst.site) {
                    continue;
                }
                if let Some(&m) = st.closure.known.get(&inst.site).and_then(|at| at.get(&inst.set)) {
                    fired.push((i, vec![m]));
                    continue;
                }
                let mut ids: Vec<usize> = st.at_site.get(&inst.site).cloned().unwrap_or_default();
                ids.sort_by_key(|&m| std::cmp::Reverse(st.closure.materializations[m].aggregate.len()));
                let candidates: Vec<&AtomSet> = ids.iter().map(|&m| &st.sets[m]).collect();
                match exact_cover(&inst.set, &candidates, &mut budget) {
                    Ok(Some(cover)) => fired.push((i, cover.into_iter().map(|k| ids[k]).collect())),
                    Ok(None) => {}
                    Err(_) => return Err(ValidityError::CoverLimit { action: inst.action.clone(), site: inst.site }),
                }
            }
            if fired.is_empty() {
                break;
            }
            st.dirty.clear();
            for (i, pieces) in &fired {
                let inst = &instances[*i];
                let f = st.closure.firings.len();
                st.closure.firings.push(Firing {
                    action: inst.action.clone(),
                    site: inst.site,
                    round,
                    pieces: pieces.clone(),
                });
                let agg = &inst.action.aggregate;
                st.add(agg, &inst.set, inst.site, round, Producer::Firing(f));
                for &d in &inst.action.dests {
                    st.add(agg, &inst.set, d, round, Producer::Firing(f));
                }
            }
            let done: BTreeSet<usize> = fired.iter().map(|(i, _)| *i).collect();
            pending.retain(|i| !done.contains(i));
        }
        let mut closure = st.closure;
        closure.universe = universe;
        closure.not_enabled = pending.iter().map(|&i| (instances[i].action.clone(), instances[i].site)).collect();
        Ok(closure)
    }
}

/// The closure under construction, with bit-set views for the cover searches.
#[derive(Default)]
struct State {
    closure: Closure,
    /// Bit set of each materialisation, by index.
    sets: Vec<AtomSet>,
    /// Materialisations at each site, in order of appearance.
    at_site: HashMap<SiteId, Vec<usize>>,
    /// Sites whose state changed in the last round.
    dirty: BTreeSet<SiteId>,
}

impl State {
    fn add(&mut self, aggregate: &Aggregate, set: &AtomSet, site: SiteId, round: usize, producer: Producer) {
        let id = self.closure.materializations.len();
        match self.closure.known.entry(site).or_default().entry(set.clone()) {
            Entry::Occupied(_) => return,
            Entry::Vacant(v) => v.insert(id),
        };
        self.closure.materializations.push(Materialization { aggregate: aggregate.clone(), site, round, producer });
        self.sets.push(set.clone());
        self.at_site.entry(site).or_default().push(id);
        self.dirty.insert(site);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;

    fn agg(s: &str) -> Aggregate {
        s.parse().unwrap()
    }

    #[test]
    fn recursive_doubling_rounds() {
        let p = parse(
            "IN: A @ 0; B @ 1; C @ 2; D @ 3\nOUT: A+B+C+D @ 0, 1, 2, 3\nA @ 0 -> 1; B @ 1 -> 0\nC @ 2 -> 3; D @ 3 -> 2\n\
             A+B @ 0 -> 2; A+B @ 1 -> 3\nC+D @ 2 -> 0; C+D @ 3 -> 1\nA+B+C+D @ 0, 1, 2, 3\n",
        )
        .unwrap();
        let c = p.closure(&Membership::default()).unwrap();
        assert!(c.is_well_formed());
        for s in 0..4 {
            assert!(c.contains(&agg("A+B+C+D"), SiteId(s)));
        }
        let rounds: BTreeMap<String, usize> = c.firings().iter().map(|f| (f.action.to_string(), f.round)).collect();
        assert_eq!(rounds["A @ 0 -> 1"], 1);
        assert_eq!(rounds["A+B @ 0 -> 2"], 2);
        assert_eq!(rounds["A+B+C+D @ 3"], 3);
        // The final aggregation at 0 is enabled by A+B (local, round 2) and C+D (arrived from 2).
        let last = c.firings().iter().position(|f| f.action.to_string() == "A+B+C+D @ 0").unwrap();
        let pieces: BTreeSet<String> =
            c.firings()[last].pieces.iter().map(|&m| c.materializations()[m].aggregate.to_string()).collect();
        assert_eq!(pieces, BTreeSet::from(["A+B".to_string(), "C+D".to_string()]));
        let deps: BTreeSet<String> =
            c.dependencies(last).into_iter().map(|f| c.firings()[f].action.to_string()).collect();
        assert_eq!(deps, BTreeSet::from(["A+B @ 0 -> 2".to_string(), "C+D @ 2 -> 0".to_string()]));
        assert_eq!(c.firing_order().len(), p.body.len());
    }

    #[test]
    fn overlapping_pieces_do_not_enable() {
        // A+B and B+C at site 0 overlap: A+B+C is not enabled (no exact cover).
        let p = parse("IN: A @ 0; B @ 0; C @ 0; B2 @ 1\nA+B @ 0\nB+C @ 0\nA+B+C @ 0 -> 1").unwrap();
        let c = p.closure(&Membership::default()).unwrap();
        assert_eq!(c.not_enabled().len(), 0, "A, B, C are pieces too, so A+B+C is enabled");
        let p = parse("IN: A @ 0; B @ 1; C @ 1\nA @ 0 -> 1\nA+B @ 1 -> 2\nB+C @ 1 -> 2\nA+B+C @ 2").unwrap();
        let c = p.closure(&Membership::default()).unwrap();
        assert_eq!(c.not_enabled(), &[(parse("A+B+C @ 2").unwrap().body.into_iter().next().unwrap(), SiteId(2))]);
    }

    #[test]
    fn unknown_partition_is_an_error() {
        let p = parse("IN: A @ 0\nA @ G").unwrap();
        assert!(matches!(p.closure(&Membership::default()), Err(ValidityError::UnknownPartition(_))));
    }
}
