//! Atom refinement: cutting every atom of a program into `k` chunks, so that synthesis can
//! pipeline (a ring or a tree moves chunk `c` on one link while chunk `c+1` is on the one
//! before) and split a collective across several rings.
//!
//! An atom is a piece of a tensor that the program moves and ⊕-aggregates whole. Its `k`
//! chunks are the `k` equal slices of it (for a preamble built from tensor blocks, `k` slices
//! of the cell along its longest dimension, see [`Preamble::refined`]), named
//! `{atom}__{c}of{k}` for `c` in `1..=k`, `c` padded to the width of `k` so that names sort
//! in chunk order ([`chunk_name`]). Since ⊕ is elementwise, the
//! aggregate `A+B` of two copies of one cell is, chunk by chunk, `A__c+B__c`: the refined
//! `OUT` requires, for every requirement `A+B @ t`, each `A__cofk+B__cofk @ t`. A consumer
//! that reads the whole block re-joins the chunks where it runs (the lowering's stitch, which
//! concatenates the atoms of a block, does so without knowing they are chunks).
//!
//! So a refined program is an ordinary ExProg program over more atoms: the checker, the
//! validity semantics, the rewrites and the simulator need nothing new. What is new is the
//! relation to the original preamble, which [`refinement_of`] checks: a refined program's
//! preamble must be exactly [`refine`] of the original with some `k`, and then a valid refined
//! program meets the original `OUT` chunk by chunk.
//!
//! ```
//! use einsum_exprog::{Program, refine};
//! let p: Program = "IN: A @ 0; B @ 1\nOUT: A+B @ 0, 1".parse().unwrap();
//! let q = refine(&p, 2).unwrap();
//! assert_eq!(q.to_string().lines().last(), Some("OUT: A__1of2+B__1of2 @ 0, 1; A__2of2+B__2of2 @ 0, 1"));
//! assert_eq!(einsum_exprog::refinement_of(&p, &q), Ok(2));
//! ```

use std::collections::{BTreeMap, BTreeSet};

use einsum_core::{Interval, TensorType};

use crate::action::Action;
use crate::aggregate::Aggregate;
use crate::ids::AtomId;
use crate::preamble::{Atom, AtomCopy, ConsumerInput, Preamble};
use crate::program::{Input, Program, Requirement};

/// Separator between an atom's name and its chunk number in [`chunk_name`].
const SEPARATOR: &str = "__";

/// Why a program or preamble cannot be refined, or is not a refinement of another.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RefineError {
    /// Zero chunks.
    #[error("an atom cannot be cut into 0 chunks")]
    NoChunks,
    /// A generated chunk name is already an atom of the program.
    #[error("chunk {chunk} of atom {atom} would be called {name}, which the program already uses")]
    NameClash {
        /// The atom being cut.
        atom: AtomId,
        /// The chunk, from 1.
        chunk: usize,
        /// The clashing name.
        name: AtomId,
    },
    /// A preamble cell too small to cut into that many chunks.
    #[error("cell {block} is {extent} elements along its longest dimension, too few for {chunks} chunks")]
    CellTooSmall {
        /// The cell.
        block: TensorType,
        /// Its longest extent.
        extent: usize,
        /// The chunks asked for.
        chunks: usize,
    },
    /// A program whose header is not the refinement of the original's with any chunk count.
    #[error(
        "the program's GPUS, PARTITIONS, IN and OUT are not those of the preamble cut into {chunks} chunks: {reason}"
    )]
    NotARefinement {
        /// The chunk count its atom count implies.
        chunks: usize,
        /// The first difference.
        reason: String,
    },
}

/// The name of chunk `chunk` (0-based) of `chunks` of `atom`: `{atom}__{chunk+1}of{chunks}`,
/// the chunk number padded with zeros to the width of `chunks` (`A__07of48`), so that names
/// sort in chunk order. A body's actions are ordered by name, and so are the transfers its
/// lowering issues at one instant; a link that serves its transfers in issue order
/// (`einsum_sim::LinkService::Fifo`) then sends chunk `c` of a pipelined ring or tree before
/// chunk `c + 1`.
pub fn chunk_name(atom: &AtomId, chunk: usize, chunks: usize) -> AtomId {
    let width = chunks.to_string().len();
    let name = format!("{atom}{SEPARATOR}{:0width$}of{chunks}", chunk + 1);
    AtomId::new(&name).unwrap_or_else(|_| unreachable!("an identifier, '_' and digits make an identifier: {name}"))
}

/// Chunk `chunk` of `aggregate`: the sum of that chunk of each of its atoms.
fn chunk_aggregate(aggregate: &Aggregate, chunk: usize, chunks: usize) -> Aggregate {
    Aggregate::new(aggregate.atoms().iter().map(|a| chunk_name(a, chunk, chunks)))
        .unwrap_or_else(|_| unreachable!("an aggregate has at least one atom, and so do its chunks"))
}

/// `program` with every atom cut into `chunks` chunks of equal size (see the module docs):
/// each `IN` atom becomes `chunks` atoms on its site, each `OUT` requirement and each action
/// one per chunk. A valid program's refinement is valid. One chunk returns the program as it
/// is; zero chunks, or a chunk name the program already uses, is an error.
pub fn refine(program: &Program, chunks: usize) -> Result<Program, RefineError> {
    match chunks {
        0 => return Err(RefineError::NoChunks),
        1 => return Ok(program.clone()),
        _ => {}
    }
    let atoms = program.atoms();
    let mut inputs = BTreeMap::new();
    for atom in &atoms {
        for c in 0..chunks {
            let name = chunk_name(atom, c, chunks);
            if atoms.contains(&name) {
                return Err(RefineError::NameClash { atom: atom.clone(), chunk: c + 1, name });
            }
            if let Some(input) = program.inputs.get(atom) {
                inputs.insert(name, Input { site: input.site, size_gb: input.size_gb / chunks as f64 });
            }
        }
    }
    let outputs: BTreeSet<Requirement> = program
        .outputs
        .iter()
        .flat_map(|r| (0..chunks).map(|c| Requirement::new(chunk_aggregate(&r.aggregate, c, chunks), r.target.clone())))
        .collect();
    let body: BTreeSet<Action> = program
        .body
        .iter()
        .flat_map(|a| {
            (0..chunks).map(|c| Action {
                aggregate: chunk_aggregate(&a.aggregate, c, chunks),
                source: a.source.clone(),
                dests: a.dests.clone(),
            })
        })
        .collect();
    Ok(Program { gpus: program.gpus.clone(), partitions: program.partitions.clone(), inputs, outputs, body })
}

/// The chunk count `k` for which `refined`'s header (`GPUS`, `PARTITIONS`, `IN` sites and
/// atoms, `OUT`) is that of [`refine`]`(original, k)`: the check that a program synthesized
/// over chunks answers the original preamble. Sizes are not compared (a preamble cut along
/// a tensor dimension has chunks of slightly unequal sizes when the extent does not divide).
pub fn refinement_of(original: &Program, refined: &Program) -> Result<usize, RefineError> {
    let n = original.inputs.len().max(1);
    let chunks = refined.inputs.len() / n;
    let not = |reason: String| RefineError::NotARefinement { chunks, reason };
    if chunks == 0 || !refined.inputs.len().is_multiple_of(n) {
        return Err(not(format!("{} IN atoms are not a multiple of the preamble's {n}", refined.inputs.len())));
    }
    let expected = refine(&original.with_body([]), chunks)?;
    if expected.gpus != refined.gpus {
        return Err(not("GPUS differ".to_string()));
    }
    if expected.partitions != refined.partitions {
        return Err(not("PARTITIONS differ".to_string()));
    }
    for (atom, input) in &expected.inputs {
        match refined.inputs.get(atom) {
            Some(i) if i.site == input.site => {}
            Some(i) => return Err(not(format!("{atom} is at site {} instead of {}", i.site, input.site))),
            None => return Err(not(format!("IN lacks {atom}"))),
        }
    }
    if let Some(r) = expected.outputs.symmetric_difference(&refined.outputs).next() {
        return Err(not(format!("OUT differs at {r}")));
    }
    Ok(chunks)
}

impl Preamble {
    /// The largest chunk count [`Preamble::refined`] accepts: the smallest, over the cells, of
    /// their longest extent (1 for a preamble without cells).
    pub fn max_chunks(&self) -> usize {
        self.atoms.iter().map(|a| longest(a).1).min().unwrap_or(1).max(1)
    }

    /// The preamble with every cell cut into `chunks` slices along its longest dimension (the
    /// first, on a tie; never the last index of a [widened](Atom::widened) cell, whose rows
    /// stay whole), as even as the extent allows: cell `i`'s slice `c` is atom
    /// `i * chunks + c`, its copies are the chunks ([`chunk_name`]) of the cell's copies,
    /// held by the same producers, and each consumer reads the slices of its cells. The
    /// program is [`refine`] of this one's with each chunk's exact size. The lowering then
    /// slices each chunk from its holder and stitches a consumer's block from the chunks.
    pub fn refined(&self, chunks: usize) -> Result<Preamble, RefineError> {
        if chunks == 1 {
            return Ok(self.clone());
        }
        let mut program = refine(&self.program, chunks)?;
        let width = self.dtype.size_bytes() as f64;
        let mut atoms = Vec::with_capacity(self.atoms.len() * chunks);
        let mut copies = BTreeMap::new();
        for (i, cell) in self.atoms.iter().enumerate() {
            let (dim, extent) = longest(cell);
            if extent < chunks {
                return Err(RefineError::CellTooSmall { block: cell.block.clone(), extent, chunks });
            }
            let Interval { lo, .. } = cell.block.dims()[dim];
            for c in 0..chunks {
                let mut dims = cell.block.dims().to_vec();
                dims[dim] = Interval { lo: lo + extent * c / chunks, hi: lo + extent * (c + 1) / chunks };
                let block = TensorType::from_intervals(dims);
                let names: Vec<AtomId> = cell.copies.iter().map(|a| chunk_name(a, c, chunks)).collect();
                let atom =
                    Atom { block, producer_block: cell.producer_block.clone(), copies: names, widened: cell.widened };
                let volume = atom.elements();
                for (name, original) in atom.copies.iter().zip(&cell.copies) {
                    if let (Some(copy), Some(input)) = (self.copies.get(original), program.inputs.get_mut(name)) {
                        copies.insert(name.clone(), AtomCopy { atom: i * chunks + c, ..*copy });
                        input.size_gb = volume * width / 1e9;
                    }
                }
                atoms.push(atom);
            }
        }
        let consumers = self
            .consumers
            .iter()
            .map(|c| ConsumerInput {
                partition: c.partition.clone(),
                block: c.block.clone(),
                atoms: c.atoms.iter().flat_map(|&a| (0..chunks).map(move |k| a * chunks + k)).collect(),
            })
            .collect();
        Ok(Preamble { program, whole: self.whole.clone(), dtype: self.dtype, atoms, copies, consumers })
    }

    /// This preamble refined to match `program`, a body synthesized for it, possibly over
    /// chunks ([`refinement_of`] finds how many): what lowering needs to map the program's
    /// atoms back to tensor pieces.
    pub fn refined_for(&self, program: &Program) -> Result<Preamble, RefineError> {
        let chunks = refinement_of(&self.program, program)?;
        self.refined(chunks)
    }
}

/// The longest dimension of `block` (the first, on a tie) and its extent.
/// The dimension a cell is cut along and its extent: the longest (the first, on a tie),
/// but never the last index of a widened cell (whose rows stay whole; `(0, 1)` when it has no
/// other dimension, so that it is never cut).
fn longest(cell: &Atom) -> (usize, usize) {
    let dims = cell.block.dims();
    let cuttable = if cell.widened { dims.len().saturating_sub(1) } else { dims.len() };
    let (d, n) = dims[..cuttable]
        .iter()
        .enumerate()
        .fold((0, 0), |best, (d, iv)| if iv.len() > best.1 { (d, iv.len()) } else { best });
    if cell.widened && n == 0 { (0, 1) } else { (d, n) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SiteId;

    #[test]
    fn a_valid_program_refines_to_a_valid_one() {
        let p: Program = "GPUS: 0, 1, 2\nPARTITIONS: S {size 1} T {size 2}\nIN: A @ 0; B @ 1 (size: 0.5 GB)\n\
                          OUT: A+B @ S; A @ 2\nA @ 0 -> 1, 2\nA+B @ 1"
            .parse()
            .unwrap();
        p.validate().unwrap();
        let q = refine(&p, 3).unwrap();
        q.validate().unwrap();
        assert_eq!(q.inputs.len(), 6);
        assert_eq!(q.body.len(), 6);
        let b2 = &q.inputs[&AtomId::new("B__2of3").unwrap()];
        assert_eq!((b2.site, b2.size_gb), (SiteId(1), 0.5 / 3.0));
        assert_eq!(refinement_of(&p, &q), Ok(3));
        assert_eq!(refinement_of(&p, &p), Ok(1));
        assert_eq!(refine(&p, 1).unwrap(), p);
        assert_eq!(refine(&p, 0), Err(RefineError::NoChunks));
    }

    #[test]
    fn a_program_missing_a_chunk_is_not_a_refinement() {
        let p: Program = "IN: A @ 0; B @ 1\nOUT: A+B @ 0".parse().unwrap();
        let mut q = refine(&p, 2).unwrap();
        let last = q.outputs.iter().next_back().cloned().unwrap();
        q.outputs.remove(&last);
        assert!(matches!(refinement_of(&p, &q), Err(RefineError::NotARefinement { chunks: 2, .. })));
        let mut q = refine(&p, 2).unwrap();
        q.inputs.get_mut(&AtomId::new("A__1of2").unwrap()).unwrap().site = SiteId(1);
        let e = refinement_of(&p, &q).unwrap_err().to_string();
        assert!(e.contains("A__1of2 is at site 1 instead of 0"), "{e}");
    }

    #[test]
    fn chunk_names_sort_in_chunk_order() {
        let a = AtomId::new("A").unwrap();
        let names: Vec<AtomId> = (0..48).map(|c| chunk_name(&a, c, 48)).collect();
        assert_eq!((names[0].to_string(), names[47].to_string()), ("A__01of48".into(), "A__48of48".into()));
        assert!(names.windows(2).all(|w| w[0] < w[1]), "{names:?}");
        assert_eq!(chunk_name(&a, 2, 8).to_string(), "A__3of8");
        assert_eq!(chunk_name(&a, 99, 100).to_string(), "A__100of100");
    }

    #[test]
    fn names_that_exist_are_not_reused() {
        let p: Program = "IN: A @ 0; A__1of2 @ 1\nOUT: A @ 1".parse().unwrap();
        let e = refine(&p, 2).unwrap_err();
        assert!(e.to_string().contains("would be called A__1of2"), "{e}");
    }
}
