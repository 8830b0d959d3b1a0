//! How the search scores a candidate: validity (Definition 5.5), the lowering to a task DAG
//! and its simulated end times, computed over atoms interned once per search.
//!
//! The reference path is `Program::validate_with` (`validity.rs`, `closure.rs`) then
//! [`crate::lower`] then the simulator; it is general (any program, any membership, with
//! the closure, its firings and labelled tasks kept for callers), and the search called it
//! once per candidate. Profiled on the exchange corpus (`perf record --call-graph dwarf` of
//! `examples/exchange_corpus`), the closure was half of the search's time and the static
//! checks, lowering and clones most of the rest; the simulation itself 3%: the closure
//! re-derived its universe of atoms from the strings of every action
//! (`Program::atoms`), sorted every site's materialisations for each instance it tried,
//! cloned an aggregate into its index for each materialisation and an action into each
//! firing, and the lowering formatted a label per task.
//!
//! [`Evaluator`] computes the same thing for the one preamble a search works on: the atoms
//! are numbered once (their sorted order, the reference universe, so covers are found in
//! the same order), a materialisation is a bit set with its atom count, producer and size, each
//! site's materialisations are kept in the order the reference sorts them to (largest
//! first, then oldest) as they appear instead of being sorted per attempt, the static
//! checks and the resolved `OUT` requirements of a membership are computed once per
//! membership, and the tasks carry no label. The simulated end times are bit for bit the
//! reference's (the same tasks in the same order); the module's tests check that on
//! valid and invalid programs, and `search.rs`'s tests that a search is unchanged. A change
//! to the semantics of `closure.rs` or `lower.rs` must be made here too; those tests fail
//! until it is.

use std::collections::{BTreeSet, HashMap};

use einsum_core::FastMap;
use einsum_sim::{GB, SimGraph, SimTask, SimTaskId, Topology, Workspace};

use crate::action::Action;
use crate::aggregate::Aggregate;
use crate::atomset::AtomSet;
use crate::cover::exact_cover;
use crate::ids::{AtomId, SiteId};
use crate::membership::Membership;
use crate::program::Program;
use crate::target::Target;

/// Steps the exact-cover searches of one closure may take before the candidate counts as
/// invalid: the reference closure's budget (`closure.rs`), so both give up alike.
const COVER_BUDGET: u64 = 20_000_000;

/// What the search needs of one preamble's candidates, prepared once.
pub(crate) struct Evaluator {
    /// The preamble (partitions possibly declared by size; no body).
    preamble: Program,
    /// Every atom of the preamble by name, numbered in name order (the reference universe).
    atoms: FastMap<AtomId, usize>,
    /// Each atom's size in GB, by number.
    sizes_gb: Vec<f64>,
    /// `IN`: each atom's number and site, in name order.
    inputs: Vec<(usize, SiteId)>,
    /// Each atom alone, by number: the sets of the closure's `IN` materialisations.
    singletons: Vec<AtomSet>,
    /// `GPUS`, when declared (the static checks' declared sites).
    gpus: Option<BTreeSet<SiteId>>,
    /// Per membership: the `OUT` requirements resolved to (atoms, site) pairs, or `None`
    /// when the preamble fails its static checks under that membership.
    requirements: HashMap<Membership, Option<Vec<(AtomSet, SiteId)>>>,
    /// Every aggregate of a body met so far, by [`Aggregate::shared_address`] (with a clone
    /// that keeps the address its own): its atoms and size, or `None` if an atom is not
    /// declared. Candidates share most of their actions' aggregates with the bodies they were
    /// made from, so most are looked up here instead of atom by atom.
    interned: FastMap<usize, (Aggregate, Option<(AtomSet, f64)>)>,
    /// The simulator's buffers, kept from one candidate to the next.
    workspace: Workspace,
}

/// One action instance of a candidate, interned.
struct Instance<'e> {
    set: &'e AtomSet,
    site: SiteId,
    dests: Vec<SiteId>,
    /// The aggregate's number of atoms.
    len: usize,
    /// The aggregate's size in bytes (its largest atom's).
    bytes: f64,
}

/// One aggregate present at one site (its set borrowed from the evaluator's singletons or
/// the candidate's instances, so that a materialisation copies no set).
struct Mat<'a> {
    set: &'a AtomSet,
    site: SiteId,
    /// Its number of atoms (the cover order: larger first).
    len: usize,
    /// Size in bytes.
    bytes: f64,
    /// The firing that made it present first (`None`: `IN`).
    producer: Option<usize>,
}

/// One firing: an instance, the pieces that enabled it, and its aggregate at its site.
struct Firing {
    instance: usize,
    pieces: Vec<usize>,
    /// The materialisation of the aggregate at the firing's site (made by this firing or
    /// present before it).
    own: usize,
}

/// The closure under construction, over sites numbered below its tables' length.
struct Closure<'a> {
    mats: Vec<Mat<'a>>,
    /// The materialisations by site and atom set.
    known: FastMap<(SiteId, &'a AtomSet), usize>,
    /// Each site's materialisations, larger aggregates first, then in order of appearance:
    /// the order the reference closure sorts them into before each cover search. By site id.
    at_site: Vec<Vec<usize>>,
    /// Whether each site's state changed in the last round, by site id.
    dirty: Vec<bool>,
    firings: Vec<Firing>,
}

impl<'a> Closure<'a> {
    /// No materialisation yet, on sites numbered below `sites`, with room for `mats` of them.
    fn new(sites: usize, mats: usize) -> Closure<'a> {
        Closure {
            mats: Vec::with_capacity(mats),
            known: FastMap::with_capacity_and_hasher(mats, Default::default()),
            at_site: vec![Vec::new(); sites],
            dirty: vec![false; sites],
            firings: Vec::new(),
        }
    }

    /// The materialisation of `set` at `site`, if present.
    fn find(&self, site: SiteId, set: &AtomSet) -> Option<usize> {
        self.known.get(&(site, set)).copied()
    }

    /// Adds `set` (of `len` atoms, `bytes` in size) at `site` unless present; its number.
    fn add(&mut self, set: &'a AtomSet, len: usize, bytes: f64, site: SiteId, producer: Option<usize>) -> usize {
        let id = self.mats.len();
        let known = self.known.entry((site, set)).or_insert(id);
        if *known != id {
            return *known;
        }
        self.mats.push(Mat { set, site, len, bytes, producer });
        let list = &mut self.at_site[site.0];
        let at = list.partition_point(|&m| self.mats[m].len >= len);
        list.insert(at, id);
        self.dirty[site.0] = true;
        id
    }
}

impl Evaluator {
    /// The evaluator of `preamble`'s candidates (the body is ignored).
    pub(crate) fn new(preamble: &Program) -> Evaluator {
        let atoms: FastMap<AtomId, usize> = preamble.inputs.keys().enumerate().map(|(i, a)| (a.clone(), i)).collect();
        Evaluator {
            atoms,
            sizes_gb: preamble.inputs.values().map(|i| i.size_gb).collect(),
            inputs: preamble.inputs.values().enumerate().map(|(i, input)| (i, input.site)).collect(),
            singletons: (0..preamble.inputs.len())
                .map(|i| {
                    let mut set = AtomSet::empty();
                    set.insert(i);
                    set
                })
                .collect(),
            gpus: preamble.gpus.clone(),
            requirements: HashMap::new(),
            interned: FastMap::default(),
            workspace: Workspace::default(),
            preamble: preamble.with_body([]),
        }
    }

    /// The atoms of `aggregate` as a set, or `None` if one is not declared by `IN`.
    fn set_of<'a>(&self, atoms: impl Iterator<Item = &'a AtomId>) -> Option<(AtomSet, f64)> {
        let mut set = AtomSet::empty();
        let mut gb = 0.0f64;
        for a in atoms {
            let &i = self.atoms.get(a)?;
            set.insert(i);
            gb = gb.max(self.sizes_gb[i]);
        }
        Some((set, gb * GB))
    }

    /// The `OUT` requirements resolved under `membership`, after the static checks of the
    /// preamble resolved under it, computed once per membership (`None`: a check or the
    /// membership fails).
    fn requirements(&mut self, membership: &Membership) -> Option<&[(AtomSet, SiteId)]> {
        if !self.requirements.contains_key(membership) {
            let preamble = self.preamble.resolve(membership);
            let ok = preamble.check().is_ok() && preamble.check_membership(membership).is_ok();
            let resolved = ok
                .then(|| {
                    let mut reqs = Vec::new();
                    for r in &preamble.outputs {
                        let (set, _) = self.set_of(r.aggregate.atoms().iter())?;
                        for site in membership.resolve(&r.target)? {
                            reqs.push((set.clone(), site));
                        }
                    }
                    Some(reqs)
                })
                .flatten();
            self.requirements.insert(membership.clone(), resolved);
        }
        self.requirements.get(membership).and_then(|r| r.as_deref())
    }

    /// Adds the aggregates of `body` to [`Evaluator::interned`].
    fn intern(&mut self, body: &BTreeSet<Action>) {
        for action in body {
            let key = action.aggregate.shared_address();
            if !self.interned.contains_key(&key) {
                let set = self.set_of(action.aggregate.atoms().iter());
                self.interned.insert(key, (action.aggregate.clone(), set));
            }
        }
    }

    /// The body's instances in the reference's order (body order, then site), or `None` if
    /// an action fails a static check (an undeclared atom, site or partition, or a transfer
    /// to its own source). The body's aggregates must be interned.
    fn instances(&self, body: &BTreeSet<Action>, membership: &Membership) -> Option<Vec<Instance<'_>>> {
        let declared = |s: &SiteId| self.gpus.as_ref().is_none_or(|g| g.contains(s));
        let mut out = Vec::with_capacity(body.len());
        for action in body {
            let (_, interned) = self.interned.get(&action.aggregate.shared_address())?;
            let (set, bytes) = interned.as_ref().map(|(set, bytes)| (set, *bytes))?;
            let dests: Vec<SiteId> = action.dests.iter().copied().collect();
            if !dests.iter().all(declared) {
                return None;
            }
            let sites = match &action.source {
                Target::Site(s) if declared(s) && !action.dests.contains(s) => vec![*s],
                Target::Site(_) => return None,
                Target::Partition(p) if self.preamble.partitions.contains_key(p) => {
                    membership.resolve(&action.source)?
                }
                Target::Partition(_) => return None,
            };
            for site in sites {
                out.push(Instance { set, site, dests: dests.clone(), len: action.aggregate.len(), bytes });
            }
        }
        Some(out)
    }

    /// When each task of the lowering of the preamble with `body` ends on `topology`, in
    /// seconds, if that program is valid under `membership`: for `program` the preamble
    /// resolved under `membership` with `body`, what `program.validate_with(membership)`,
    /// [`crate::lower`] and [`SimGraph::simulate_end_times`] give, bit for bit, and `None`
    /// where the reference finds the program invalid (or cannot simulate it).
    pub(crate) fn end_times(
        &mut self,
        body: &BTreeSet<Action>,
        membership: &Membership,
        topology: &Topology,
    ) -> Option<Vec<f64>> {
        self.requirements(membership)?;
        self.intern(body);
        let instances = self.instances(body, membership)?;
        let closure = self.closure(&instances)?;
        let reqs = self.requirements.get(membership)?.as_deref()?;
        if !reqs.iter().all(|(set, site)| closure.find(*site, set).is_some()) {
            return None;
        }
        let graph = lower(&instances, &closure);
        graph.simulate_end_times_in(topology, &mut self.workspace).ok()
    }

    /// `S*(P)` in rounds, as `closure.rs` computes it; `None` if some instance is never
    /// enabled or a cover search runs past its budget.
    fn closure<'a>(&'a self, instances: &'a [Instance<'a>]) -> Option<Closure<'a>> {
        let sites = self
            .inputs
            .iter()
            .map(|(_, s)| s)
            .chain(instances.iter().flat_map(|i| std::iter::once(&i.site).chain(&i.dests)))
            .map(|s| s.0 + 1)
            .max()
            .unwrap_or(0);
        // at most: every input, and every instance's aggregate at its site and its destinations
        let mats = self.inputs.len() + instances.iter().map(|i| 1 + i.dests.len()).sum::<usize>();
        let mut st = Closure::new(sites, mats);
        for &(atom, site) in &self.inputs {
            st.add(&self.singletons[atom], 1, self.sizes_gb[atom] * GB, site, None);
        }
        for inst in instances {
            st.dirty[inst.site.0] = true;
        }
        let mut pending: Vec<usize> = (0..instances.len()).collect();
        let mut budget = COVER_BUDGET;
        let mut candidates: Vec<&AtomSet> = Vec::new();
        loop {
            let mut fired: Vec<(usize, Vec<usize>)> = Vec::new();
            for &i in &pending {
                let inst = &instances[i];
                if !st.dirty[inst.site.0] {
                    continue;
                }
                if let Some(m) = st.find(inst.site, inst.set) {
                    fired.push((i, vec![m]));
                    continue;
                }
                let ids = &st.at_site[inst.site.0];
                candidates.clear();
                candidates.extend(ids.iter().map(|&m| st.mats[m].set));
                match exact_cover(inst.set, &candidates, &mut budget) {
                    Ok(Some(cover)) => fired.push((i, cover.into_iter().map(|k| ids[k]).collect())),
                    Ok(None) => {}
                    Err(_) => return None,
                }
            }
            if fired.is_empty() {
                break;
            }
            st.dirty.fill(false);
            let mut done = vec![false; instances.len()];
            for (i, pieces) in fired {
                let inst = &instances[i];
                let f = st.firings.len();
                let own = st.add(inst.set, inst.len, inst.bytes, inst.site, Some(f));
                for &d in &inst.dests {
                    st.add(inst.set, inst.len, inst.bytes, d, Some(f));
                }
                st.firings.push(Firing { instance: i, pieces, own });
                done[i] = true;
            }
            pending.retain(|&i| !done[i]);
        }
        pending.is_empty().then_some(st)
    }
}

/// The tasks of one firing (as `lower.rs`'s `FiringTasks`).
struct Tasks {
    ready: Option<SimTaskId>,
    transfers: Vec<(SiteId, SimTaskId)>,
}

impl Tasks {
    fn arrival(&self, site: SiteId) -> Option<SimTaskId> {
        self.transfers.iter().find(|(d, _)| *d == site).map(|(_, t)| *t).or(self.ready)
    }
}

/// The closure's task DAG, as [`crate::lower`] builds it (without labels).
fn lower(instances: &[Instance], closure: &Closure) -> SimGraph {
    let mats = &closure.mats;
    let mut graph = SimGraph::new();
    let mut tasks: Vec<Tasks> = Vec::with_capacity(closure.firings.len());
    // The task that formed each (aggregate, site) by aggregation, by materialisation.
    let mut formed: FastMap<usize, SimTaskId> = FastMap::default();
    for f in &closure.firings {
        let inst = &instances[f.instance];
        let mut deps: Vec<SimTaskId> = f
            .pieces
            .iter()
            .filter_map(|&m| {
                let mat = &mats[m];
                tasks.get(mat.producer?)?.arrival(mat.site)
            })
            .collect();
        deps.sort_unstable();
        deps.dedup();
        let present = f.pieces.len() == 1 && mats[f.pieces[0]].set == inst.set;
        let ready = if present {
            deps.first().copied()
        } else if let Some(&earlier) = formed.get(&f.own) {
            Some(earlier)
        } else {
            let read: f64 = f.pieces.iter().map(|&m| mats[m].bytes).sum();
            let id = graph.push(SimTask::aggregate(String::new(), inst.site, read, inst.bytes).after(deps));
            formed.insert(f.own, id);
            Some(id)
        };
        let transfers = inst
            .dests
            .iter()
            .filter(|&&d| d != inst.site)
            .map(|&d| (d, graph.push(SimTask::transfer(String::new(), inst.site, d, inst.bytes).after(ready))))
            .collect();
        tasks.push(Tasks { ready, transfers });
    }
    graph
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite::unguarded;
    use crate::synth::collectives::{Collective, all_reduce_whole};
    use crate::synth::{canonical_membership, naive};
    use einsum_core::SeededRng as Rng;

    /// The reference: validity, lowering and the simulator's end times.
    fn reference(program: &Program, membership: &Membership, topology: &Topology) -> Option<Vec<f64>> {
        let v = program.validate_with(membership).ok()?;
        crate::lower(program, &v.closure).graph.simulate_end_times(topology).ok()
    }

    /// Naive programs of a few preambles and random walks of deletions, relays and source
    /// substitutions from them: the evaluator agrees with the reference on every one, valid
    /// or not, bit for bit.
    #[test]
    fn agrees_with_the_reference_bit_for_bit() {
        let t = Topology::preset("dgx-v100").unwrap();
        let example = crate::load(
            "GPUS: 0, 1, 2, 3, 4, 5, 6, 7\nPARTITIONS: G1 {size 4} G2 {size 4}\n\
             IN: A @ 0; B @ 1; C @ 2; D @ 3; E @ 4; F @ 5; G @ 6; H @ 7\nOUT: A+B+E+F @ G1; C+D+G+H @ G2",
        )
        .unwrap();
        let preambles = [
            Collective::AllReduce.preamble(4, 0.5),
            Collective::ReduceScatter.preamble(8, 0.25),
            Collective::AllGather.preamble(8, 0.25),
            all_reduce_whole(8, 1.0),
            example,
        ];
        let mut rng = Rng::new(7);
        let (mut valid, mut invalid) = (0, 0);
        for pre in preambles {
            let membership = canonical_membership(&pre).unwrap();
            let resolved = pre.resolve(&membership);
            let mut evaluator = Evaluator::new(&pre);
            let mut program = resolved.with_body(naive(&pre).unwrap().resolve(&membership).body);
            let mut last_valid = program.clone();
            let sites: Vec<SiteId> = pre.sites().into_iter().collect();
            for _ in 0..40 {
                let expected = reference(&program, &membership, &t);
                assert_eq!(evaluator.end_times(&program.body, &membership, &t), expected, "{program}");
                // every candidate is one rewrite from the last valid program
                if expected.is_some() {
                    valid += 1;
                    last_valid = program.clone();
                } else {
                    invalid += 1;
                    program = last_valid.clone();
                }
                let body: Vec<_> = program.body.iter().cloned().collect();
                let Some(a) = rng.pick(&body).cloned() else { break };
                let w = *rng.pick(&sites).unwrap();
                let step = match (rng.below(3), a.dests.iter().next().copied()) {
                    (0, _) | (_, None) => unguarded::delete(&program, &a),
                    (1, Some(d)) => unguarded::introduce_relay(&program, &a, d, w),
                    (_, Some(d)) => unguarded::substitute_source(&program, &a, d, w),
                };
                if let Ok(next) = step {
                    program = next;
                }
            }
        }
        assert!(valid > 20 && invalid > 20, "{valid} valid, {invalid} invalid");
    }

    #[test]
    fn undeclared_atoms_sites_and_self_transfers_are_invalid() {
        let t = Topology::preset("dgx-v100").unwrap();
        let pre = crate::load("GPUS: 0, 1, 2\nIN: A @ 0; B @ 1\nOUT: A+B @ 2").unwrap();
        let m = Membership::default();
        let mut e = Evaluator::new(&pre);
        for body in ["A @ 0 -> 2; B @ 1 -> 2; A+B @ 2", "A @ 0 -> 9; B @ 1 -> 2", "A @ 0 -> 0, 2; B @ 1 -> 2; A+B @ 2"]
        {
            let p = crate::parse(&format!("GPUS: 0, 1, 2\nIN: A @ 0; B @ 1\nOUT: A+B @ 2\n{body}")).unwrap();
            assert_eq!(e.end_times(&p.body, &m, &t), reference(&p, &m, &t), "{body}");
        }
        let unknown = crate::parse("GPUS: 0, 1, 2\nIN: A @ 0; B @ 1\nOUT: A+B @ 2\nA @ 0 -> 2; C @ 1 -> 2").unwrap();
        assert_eq!(e.end_times(&unknown.body, &m, &t), None);
    }
}
