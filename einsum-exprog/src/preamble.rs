//! Preamble generation (Section 5.3): from the blocks a producer left on the devices and the
//! blocks a consumer's join-agg spec needs, the atoms and the `GPUS`, `PARTITIONS`, `IN` and
//! `OUT` sections of the exchange program that moves them.
//!
//! - **Atoms** are the cells of the overlay: in every dimension, every lower and upper bound of
//!   every producer output block and every consumer input block, and the grid they cut. The
//!   consumer's blocks need not tile the tensor (a replicated input lists one block several
//!   times; blocks may overlap), so the grid is built from split points directly rather than
//!   with [`Tiling::overlay`]; where both families are tilings the two agree. Every existing
//!   and every required block is then a disjoint union of atoms.
//! - **`IN`** lists one ExProg atom per (atom, existing copy): a producer block listed by `m`
//!   function specs exists as `m` unaggregated copies, each on its function spec's site.
//!   Sizes are the atom's volume times the dtype width, in GB (1e9 bytes).
//! - **Row-wise aggregations** ([`Aggregation::Softmax`], given to [`preamble_with`]): the
//!   copies of a producer block shared by several function specs are partials one column
//!   wider along the last index (the statistics column of their rows), and they combine by
//!   whole rows. So no atom cuts such a block's last index: the consumer's split points
//!   inside it are dropped from the grid, a consumer block then takes the atoms it meets
//!   (not only those it contains) and slices its part after the aggregation, and the
//!   atom's size counts its statistics column ([`Atom::widened`]).
//! - **`PARTITIONS`** declares `S1`, ..., `Sp` of size 1, one per consumer function spec, so
//!   that synthesis chooses where each consumer instance runs.
//! - **`OUT`** requires, for every atom, the ⊕-aggregate of its `m` copies at the partition of
//!   every consumer function spec whose input block contains the atom.
//!
//! # Names
//!
//! Atoms are numbered `1, 2, ...` in row-major order of the overlay grid (first dimension
//! slowest). The copies of a producer block are ordered by the function spec holding them,
//! and copy `c` of atom `j` is called `Xj`, `Yj`, `Zj`, `Aj`, `Bj`, ..., `Wj` for the first 26
//! copies (`X`, `Y`, `Z`, then `A` to `W`) and `C27_j`, `C28_j`, ... after that. With the
//! copies numbered as in Example 5.4, this prints the paper's preamble exactly.
//!
//! ```
//! use einsum_core::{DType, TensorType, Tiling};
//! use einsum_exprog::{SiteId, Upstream, preamble};
//! use einsum_joinagg::{FunctionSpec, JoinAggSpec};
//!
//! // A computation input of 8 rows, split in halves on sites 0 and 1, read whole by both
//! // function specs of the consumer (a replicated input).
//! let whole = TensorType::zero_bounded(&[8]);
//! let tiling = Tiling::grid(&whole, &[vec![4]]).unwrap();
//! let sites = [SiteId(0), SiteId(1)];
//! let consumer = JoinAggSpec {
//!     functions: vec![FunctionSpec { inputs: vec![whole.clone()], outputs: vec![] }; 2],
//! };
//! let p = preamble(&Upstream::Input { tiling: &tiling, sites: &sites }, &consumer, 0, DType::F32, &sites).unwrap();
//! assert_eq!(p.atoms.len(), 2);
//! assert_eq!(p.program.to_string().lines().last(), Some("OUT: X1 @ S1, S2; X2 @ S1, S2"));
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use einsum_core::{Aggregation, CoreError, DType, Interval, TensorType, Tiling, check_tiling};
use einsum_joinagg::JoinAggSpec;

use crate::aggregate::Aggregate;
use crate::ids::{AtomId, PartitionId, SiteId};
use crate::partition::PartitionSpec;
use crate::program::{Input, Program, Requirement};

/// Bytes per GB in ExProg sizes.
const BYTES_PER_GB: f64 = 1e9;

/// Copy letters, in copy order: the paper's `X`, `Y`, then the rest of the alphabet.
const COPY_LETTERS: &[u8; 26] = b"XYZABCDEFGHIJKLMNOPQRSTUVW";

/// Where the blocks of the tensor feeding the consumer are before the exchange.
#[derive(Clone, Copy, Debug)]
pub enum Upstream<'a> {
    /// Output `output` of an already-compiled operator with join-agg spec `spec`, whose
    /// function spec `i` ran on site `placement[i]`: each distinct output block exists as one
    /// unaggregated copy per function spec that lists it.
    Spec {
        /// The producer's join-agg spec.
        spec: &'a JoinAggSpec,
        /// Which of its outputs feeds the consumer.
        output: usize,
        /// The site of every function spec, in spec order.
        placement: &'a [SiteId],
    },
    /// A computation input: block `b` of `tiling` (in its canonical order) is one complete
    /// copy on site `sites[b]`.
    Input {
        /// How the input is stored.
        tiling: &'a Tiling,
        /// The site of every block, in the tiling's block order.
        sites: &'a [SiteId],
    },
}

/// Which side of the exchange an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The producer (its spec, placement or tiling).
    Producer,
    /// The consumer's spec.
    Consumer,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Producer => "producer",
            Side::Consumer => "consumer",
        })
    }
}

/// Why a preamble cannot be generated; each message says which spec, block or site.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PreambleError {
    /// A spec with no function spec.
    #[error("the {0} spec has no function spec")]
    NoFunctionSpecs(Side),
    /// A function spec without the output (producer) or input (consumer) asked for.
    #[error("{side} function spec {function} has {count} {what}s; there is no {what} {index}")]
    MissingTensor {
        /// Producer or consumer.
        side: Side,
        /// The function spec, 0-based.
        function: usize,
        /// `"output"` or `"input"`.
        what: &'static str,
        /// The index asked for.
        index: usize,
        /// How many it has.
        count: usize,
    },
    /// The placement (or the input's site list) does not give one site per spec or block.
    #[error("the producer has {expected} {what} but {got} sites were given")]
    PlacementLength {
        /// `"function specs"` or `"blocks"`.
        what: &'static str,
        /// Number of function specs or blocks.
        expected: usize,
        /// Number of sites given.
        got: usize,
    },
    /// The device list is empty.
    #[error("the device list is empty")]
    NoDevices,
    /// A producer site that is not in the device list.
    #[error("producer {what} {index} is placed on site {site}, which is not in the device list")]
    UnknownSite {
        /// `"function spec"` or `"block"`.
        what: &'static str,
        /// Its index.
        index: usize,
        /// The site.
        site: SiteId,
    },
    /// The consumer has not one function spec per device (its `{size 1}` partitions must
    /// add up to the device count).
    #[error("the consumer has {specs} function specs but there are {devices} devices; it needs one per device")]
    DeviceCount {
        /// Consumer function specs.
        specs: usize,
        /// Distinct devices.
        devices: usize,
    },
    /// A block whose rank differs from the tensor's.
    #[error("{side} block {block} has rank {}, but the tensor has rank {rank}", block.rank())]
    RankMismatch {
        /// Producer or consumer.
        side: Side,
        /// The block.
        block: TensorType,
        /// The tensor's rank.
        rank: usize,
    },
    /// A block holding no element.
    #[error("{side} block {block} is empty")]
    EmptyBlock {
        /// Producer or consumer.
        side: Side,
        /// The block.
        block: TensorType,
    },
    /// The producer's distinct output blocks do not tile the tensor they span.
    #[error("the producer's output blocks do not tile the tensor: {0}")]
    NotATiling(CoreError),
    /// Under a row-wise aggregation, a producer block's bound cuts the last index of a
    /// shared block, whose rows must stay whole.
    #[error(
        "producer block {block} is aggregated by whole rows, but another producer block's bound cuts its last index"
    )]
    RowCut {
        /// The shared block.
        block: TensorType,
    },
    /// A consumer block outside the tensor.
    #[error("consumer function spec {function} reads {block}, which is not inside the tensor {whole}")]
    OutsideTensor {
        /// The consumer function spec.
        function: usize,
        /// Its block.
        block: TensorType,
        /// The tensor.
        whole: TensorType,
    },
}

/// One cell of the overlay: a box that every existing and every required block either
/// contains whole or misses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Atom {
    /// The cell, in absolute coordinates.
    pub block: TensorType,
    /// The producer block it lies in (whose copies hold it).
    pub producer_block: TensorType,
    /// The ExProg atom of each copy, in copy order (`X`, `Y`, ...).
    pub copies: Vec<AtomId>,
    /// Its copies are partials of a row-wise aggregation ([`Aggregation::Softmax`]): each
    /// is [`Atom::buffer_type`], the cell one column wider along its last index (the
    /// statistics column), and the cell holds its producer block's rows whole.
    pub widened: bool,
}

impl Atom {
    /// The type of a copy's buffer: the cell, one column wider along its last index where
    /// [`Atom::widened`].
    pub fn buffer_type(&self) -> TensorType {
        Aggregation::Softmax.partial_type(&self.block, self.widened)
    }

    /// Elements per copy, the statistics column included.
    pub fn elements(&self) -> f64 {
        self.buffer_type().dims().iter().map(|iv| iv.len() as f64).product()
    }
}

/// One ExProg atom of `IN`: a copy of an [`Atom`] on a site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomCopy {
    /// The atom, an index into [`Preamble::atoms`].
    pub atom: usize,
    /// Which copy, 0-based (`X` is 0).
    pub copy: usize,
    /// Where it starts.
    pub site: SiteId,
    /// What holds it: the producer function spec (for [`Upstream::Spec`]) or the block index
    /// in the tiling (for [`Upstream::Input`]); a decompose kernel slices it from there.
    pub holder: usize,
}

/// What one consumer function spec needs delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerInput {
    /// The `{size 1}` partition standing for its site (`S1` for function spec 0).
    pub partition: PartitionId,
    /// Its input block.
    pub block: TensorType,
    /// The atoms that make up the block (indices into [`Preamble::atoms`], row-major); a
    /// recompose kernel concatenates their aggregates (each sliced to the block first where
    /// it reaches outside, as a row-wise aggregation's whole rows may).
    pub atoms: Vec<usize>,
}

/// A generated preamble: the program header (with an empty body) and what lowering needs
/// to map its atoms back to tensor pieces.
#[derive(Clone, Debug, PartialEq)]
pub struct Preamble {
    /// `GPUS`, `PARTITIONS`, `IN`, `OUT`; the body is empty, for synthesis to fill.
    pub program: Program,
    /// The tensor being exchanged.
    pub whole: TensorType,
    /// Its storage dtype (atom sizes are volume × its width).
    pub dtype: DType,
    /// The overlay cells, numbered from 1 in names, in row-major order.
    pub atoms: Vec<Atom>,
    /// Every ExProg atom of `IN`.
    pub copies: BTreeMap<AtomId, AtomCopy>,
    /// One entry per consumer function spec, in spec order.
    pub consumers: Vec<ConsumerInput>,
}

impl Preamble {
    /// The ⊕-aggregate of every copy of atom `atom` (an index into [`Preamble::atoms`]):
    /// what `OUT` requires for it. `None` when the index is out of range.
    pub fn aggregate(&self, atom: usize) -> Option<Aggregate> {
        Aggregate::new(self.atoms.get(atom)?.copies.iter().cloned()).ok()
    }

    /// The copy an ExProg atom stands for.
    pub fn copy(&self, id: &AtomId) -> Option<&AtomCopy> {
        self.copies.get(id)
    }
}

/// The name of copy `copy` (0-based) of atom number `number` (1-based).
fn copy_name(copy: usize, number: usize) -> AtomId {
    let name = match COPY_LETTERS.get(copy) {
        Some(&letter) => format!("{}{number}", letter as char),
        None => format!("C{}_{number}", copy + 1),
    };
    // Always an identifier: an ASCII letter followed by digits and '_'.
    AtomId::new(&name).unwrap_or_else(|_| unreachable!("generated atom name {name} is an identifier"))
}

/// A producer block with the (site, holder) of each of its copies, in copy order.
struct ExistingBlock {
    block: TensorType,
    copies: Vec<(SiteId, usize)>,
}

/// The producer's distinct blocks with their copies, after checking them.
fn existing_blocks(producer: &Upstream<'_>, devices: &BTreeSet<SiteId>) -> Result<Vec<ExistingBlock>, PreambleError> {
    let (blocks, what) = match *producer {
        Upstream::Spec { spec, output, placement } => {
            if spec.is_empty() {
                return Err(PreambleError::NoFunctionSpecs(Side::Producer));
            }
            if placement.len() != spec.len() {
                return Err(PreambleError::PlacementLength {
                    what: "function specs",
                    expected: spec.len(),
                    got: placement.len(),
                });
            }
            let mut blocks: Vec<ExistingBlock> = Vec::new();
            for (i, (f, &site)) in spec.functions.iter().zip(placement).enumerate() {
                let block = f.outputs.get(output).ok_or(PreambleError::MissingTensor {
                    side: Side::Producer,
                    function: i,
                    what: "output",
                    index: output,
                    count: f.outputs.len(),
                })?;
                match blocks.iter_mut().find(|b| b.block == *block) {
                    Some(b) => b.copies.push((site, i)),
                    None => blocks.push(ExistingBlock { block: block.clone(), copies: vec![(site, i)] }),
                }
            }
            (blocks, "function spec")
        }
        Upstream::Input { tiling, sites } => {
            if sites.len() != tiling.len() {
                return Err(PreambleError::PlacementLength {
                    what: "blocks",
                    expected: tiling.len(),
                    got: sites.len(),
                });
            }
            let blocks = tiling
                .blocks()
                .iter()
                .zip(sites)
                .enumerate()
                .map(|(b, (block, &site))| ExistingBlock { block: block.clone(), copies: vec![(site, b)] })
                .collect();
            (blocks, "block")
        }
    };
    for b in &blocks {
        for &(site, index) in &b.copies {
            if !devices.contains(&site) {
                return Err(PreambleError::UnknownSite { what, index, site });
            }
        }
    }
    Ok(blocks)
}

/// The tensor the producer's blocks span (their bounding box), checked to be tiled by them.
fn spanned_tensor(blocks: &[ExistingBlock]) -> Result<TensorType, PreambleError> {
    let first = &blocks[0].block;
    let rank = first.rank();
    let mut dims: Vec<Interval> = first.dims().to_vec();
    for b in blocks {
        if b.block.rank() != rank {
            return Err(PreambleError::RankMismatch { side: Side::Producer, block: b.block.clone(), rank });
        }
        if b.block.is_empty() {
            return Err(PreambleError::EmptyBlock { side: Side::Producer, block: b.block.clone() });
        }
        for (d, iv) in dims.iter_mut().zip(b.block.dims()) {
            d.lo = d.lo.min(iv.lo);
            d.hi = d.hi.max(iv.hi);
        }
    }
    let whole = TensorType::from_intervals(dims);
    let boxes: Vec<TensorType> = blocks.iter().map(|b| b.block.clone()).collect();
    check_tiling(&whole, &boxes).map_err(PreambleError::NotATiling)?;
    Ok(whole)
}

/// The overlay grid: per dimension, the sorted split points.
struct Grid {
    points: Vec<Vec<usize>>,
}

impl Grid {
    fn new<'a>(rank: usize, blocks: impl Iterator<Item = &'a TensorType>) -> Self {
        let mut sets = vec![BTreeSet::new(); rank];
        for b in blocks {
            for (set, iv) in sets.iter_mut().zip(b.dims()) {
                set.insert(iv.lo);
                set.insert(iv.hi);
            }
        }
        Grid { points: sets.into_iter().map(|s| s.into_iter().collect()).collect() }
    }

    /// Number of cells along every dimension.
    fn extents(&self) -> Vec<usize> {
        self.points.iter().map(|p| p.len().saturating_sub(1)).collect()
    }

    /// Every cell, in row-major order.
    fn cells(&self) -> Vec<TensorType> {
        self.indices(&self.extents().iter().map(|&n| (0, n)).collect::<Vec<_>>())
            .into_iter()
            .map(|idx| self.cell(&idx))
            .collect()
    }

    fn cell(&self, idx: &[usize]) -> TensorType {
        TensorType::from_intervals(
            self.points.iter().zip(idx).map(|(p, &i)| Interval { lo: p[i], hi: p[i + 1] }).collect(),
        )
    }

    /// Every multi-index in the given per-dimension ranges, row-major.
    fn indices(&self, ranges: &[(usize, usize)]) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new()];
        for &(lo, hi) in ranges {
            out = out
                .into_iter()
                .flat_map(|prefix: Vec<usize>| {
                    (lo..hi).map(move |i| {
                        let mut next = prefix.clone();
                        next.push(i);
                        next
                    })
                })
                .collect();
        }
        out
    }

    /// The row-major numbers (0-based) of the cells that meet `block` (those inside it
    /// when its bounds are split points of the grid).
    fn cells_within(&self, block: &TensorType) -> Vec<usize> {
        let ranges: Vec<(usize, usize)> = self
            .points
            .iter()
            .zip(block.dims())
            .map(|(p, iv)| (p.partition_point(|&x| x <= iv.lo).saturating_sub(1), p.partition_point(|&x| x < iv.hi)))
            .collect();
        let extents = self.extents();
        self.indices(&ranges).iter().map(|idx| idx.iter().zip(&extents).fold(0, |acc, (&i, &n)| acc * n + i)).collect()
    }
}

/// The block of input `input` each function spec of `consumer` reads, checked against the
/// tensor `whole` and the number of `devices` (one function spec per device).
fn required_blocks<'c>(
    consumer: &'c JoinAggSpec,
    input: usize,
    whole: &TensorType,
    devices: usize,
) -> Result<Vec<&'c TensorType>, PreambleError> {
    if consumer.is_empty() {
        return Err(PreambleError::NoFunctionSpecs(Side::Consumer));
    }
    if consumer.len() != devices {
        return Err(PreambleError::DeviceCount { specs: consumer.len(), devices });
    }
    let mut required: Vec<&TensorType> = Vec::with_capacity(consumer.len());
    for (i, f) in consumer.functions.iter().enumerate() {
        let block = f.inputs.get(input).ok_or(PreambleError::MissingTensor {
            side: Side::Consumer,
            function: i,
            what: "input",
            index: input,
            count: f.inputs.len(),
        })?;
        if block.rank() != whole.rank() {
            return Err(PreambleError::RankMismatch { side: Side::Consumer, block: block.clone(), rank: whole.rank() });
        }
        if block.is_empty() {
            return Err(PreambleError::EmptyBlock { side: Side::Consumer, block: block.clone() });
        }
        if !block.is_projection_of(whole) {
            return Err(PreambleError::OutsideTensor { function: i, block: block.clone(), whole: whole.clone() });
        }
        required.push(block);
    }
    Ok(required)
}

/// The preamble of the exchange program that brings the tensor `producer` left on the
/// devices to input `input` of the consumer whose join-agg spec is `consumer`.
///
/// `devices` are the sites (`GPUS`); the consumer must have one function spec per distinct
/// device. Every producer site must be a device. Fails, saying what is inconsistent, when
/// the producer's blocks do not tile a tensor, a consumer block lies outside it, or an index
/// or length does not match. The producer's copies combine elementwise (see
/// [`preamble_with`] for a row-wise aggregation).
pub fn preamble(
    producer: &Upstream<'_>,
    consumer: &JoinAggSpec,
    input: usize,
    dtype: DType,
    devices: &[SiteId],
) -> Result<Preamble, PreambleError> {
    preamble_with(producer, consumer, input, dtype, devices, Aggregation::Sum)
}

/// [`preamble`] for a producer whose copies combine with `aggregation`: under a row-wise
/// one ([`Aggregation::Softmax`]) the rows of a shared producer block stay whole (module
/// docs); any other gives [`preamble`]'s preamble.
pub fn preamble_with(
    producer: &Upstream<'_>,
    consumer: &JoinAggSpec,
    input: usize,
    dtype: DType,
    devices: &[SiteId],
    aggregation: Aggregation,
) -> Result<Preamble, PreambleError> {
    let devices: BTreeSet<SiteId> = devices.iter().copied().collect();
    if devices.is_empty() {
        return Err(PreambleError::NoDevices);
    }
    let existing = existing_blocks(producer, &devices)?;
    let whole = match producer {
        Upstream::Input { tiling, .. } => {
            if let Some(b) = existing.iter().find(|b| b.block.is_empty()) {
                return Err(PreambleError::EmptyBlock { side: Side::Producer, block: b.block.clone() });
            }
            tiling.whole().clone()
        }
        Upstream::Spec { .. } => spanned_tensor(&existing)?,
    };
    if existing.is_empty() {
        // Only an input tiling of an empty tensor has no block.
        return Err(PreambleError::EmptyBlock { side: Side::Producer, block: whole });
    }

    let required = required_blocks(consumer, input, &whole, devices.len())?;

    let mut grid = Grid::new(whole.rank(), existing.iter().map(|b| &b.block).chain(required.iter().copied()));
    // Under a row-wise aggregation, the shared blocks' rows stay whole.
    let whole_rows = |b: &ExistingBlock| {
        matches!(producer, Upstream::Spec { .. }) && aggregation.widens(&b.block, b.copies.len() > 1)
    };
    if let Some(last) = whole.rank().checked_sub(1)
        && existing.iter().any(whole_rows)
    {
        let producer_points: BTreeSet<usize> =
            existing.iter().flat_map(|b| [b.block.dim(last).lo, b.block.dim(last).hi]).collect();
        for b in existing.iter().filter(|b| whole_rows(b)) {
            let Interval { lo, hi } = b.block.dim(last);
            if producer_points.range(lo + 1..hi).next().is_some() {
                return Err(PreambleError::RowCut { block: b.block.clone() });
            }
            grid.points[last].retain(|&x| x <= lo || x >= hi);
        }
    }
    let mut atoms: Vec<Atom> = grid
        .cells()
        .into_iter()
        .map(|block| Atom { producer_block: block.clone(), block, copies: Vec::new(), widened: false })
        .collect();
    let mut copies: BTreeMap<AtomId, AtomCopy> = BTreeMap::new();
    for b in &existing {
        let widened = whole_rows(b);
        for a in grid.cells_within(&b.block) {
            atoms[a].producer_block = b.block.clone();
            atoms[a].widened = widened;
            for (copy, &(site, holder)) in b.copies.iter().enumerate() {
                let id = copy_name(copy, a + 1);
                atoms[a].copies.push(id.clone());
                copies.insert(id, AtomCopy { atom: a, copy, site, holder });
            }
        }
    }

    let width = dtype.size_bytes() as f64;
    let inputs: BTreeMap<AtomId, Input> = copies
        .iter()
        .map(|(id, c)| (id.clone(), Input { site: c.site, size_gb: atoms[c.atom].elements() * width / BYTES_PER_GB }))
        .collect();

    let mut consumers = Vec::with_capacity(required.len());
    let mut outputs = BTreeSet::new();
    for (i, block) in required.iter().enumerate() {
        let partition = PartitionId::new(&format!("S{}", i + 1))
            .unwrap_or_else(|_| unreachable!("S followed by digits is an identifier"));
        let within = grid.cells_within(block);
        for &a in &within {
            let aggregate = Aggregate::new(atoms[a].copies.iter().cloned())
                .unwrap_or_else(|_| unreachable!("the producer blocks tile the tensor, so every atom has a copy"));
            outputs.insert(Requirement::new(aggregate, partition.clone()));
        }
        consumers.push(ConsumerInput { partition, block: (*block).clone(), atoms: within });
    }

    let program = Program {
        gpus: Some(devices),
        partitions: consumers.iter().map(|c| (c.partition.clone(), PartitionSpec::Size(1))).collect(),
        inputs,
        outputs,
        body: BTreeSet::new(),
    };
    Ok(Preamble { program, whole, dtype, atoms, copies, consumers })
}

#[cfg(test)]
mod tests {
    use einsum_joinagg::FunctionSpec;

    use super::*;

    fn tt(lo: &[usize], hi: &[usize]) -> TensorType {
        TensorType::new(lo, hi).unwrap()
    }

    fn sites(s: &[usize]) -> Vec<SiteId> {
        s.iter().map(|&i| SiteId(i)).collect()
    }

    #[test]
    fn copy_names_follow_the_paper_then_stay_identifiers() {
        assert_eq!(copy_name(0, 1).as_str(), "X1");
        assert_eq!(copy_name(1, 12).as_str(), "Y12");
        assert_eq!(copy_name(2, 3).as_str(), "Z3");
        assert_eq!(copy_name(3, 3).as_str(), "A3");
        assert_eq!(copy_name(25, 3).as_str(), "W3");
        assert_eq!(copy_name(26, 3).as_str(), "C27_3");
        let letters: BTreeSet<u8> = COPY_LETTERS.iter().copied().collect();
        assert_eq!(letters.len(), 26, "each copy letter is used once");
    }

    #[test]
    fn grid_cells_are_row_major_and_found_by_block() {
        let blocks = [tt(&[0, 0], &[4, 6]), tt(&[2, 3], &[4, 6])];
        let grid = Grid::new(2, blocks.iter());
        let cells = grid.cells();
        assert_eq!(cells.len(), 4);
        assert_eq!(cells[1], tt(&[0, 3], &[2, 6]));
        assert_eq!(grid.cells_within(&blocks[1]), vec![3]);
        assert_eq!(grid.cells_within(&blocks[0]), vec![0, 1, 2, 3]);
        // Row-major is the canonical order of core's tilings.
        let tiling = Tiling::grid(&blocks[0], &[vec![2], vec![3]]).unwrap();
        assert_eq!(tiling.blocks(), &cells[..]);
    }

    #[test]
    fn scalar_tensors_have_one_atom() {
        let whole = TensorType::zero_bounded(&[]);
        let tiling = Tiling::trivial(whole.clone());
        let consumer = JoinAggSpec { functions: vec![FunctionSpec { inputs: vec![whole], outputs: vec![] }] };
        let p =
            preamble(&Upstream::Input { tiling: &tiling, sites: &sites(&[0]) }, &consumer, 0, DType::F16, &sites(&[0]))
                .unwrap();
        assert_eq!(
            p.program.to_string(),
            "GPUS: 0\nPARTITIONS: S1 {size 1}\nIN: X1 @ 0 (size: 2e-9 GB)\nOUT: X1 @ S1\n"
        );
    }

    #[test]
    fn inconsistent_requests_are_errors_that_say_what() {
        let whole = TensorType::zero_bounded(&[8]);
        let halves = [tt(&[0], &[4]), tt(&[4], &[8])];
        let one = |input: TensorType, output: TensorType| FunctionSpec { inputs: vec![input], outputs: vec![output] };
        let producer = JoinAggSpec { functions: halves.iter().map(|h| one(h.clone(), h.clone())).collect() };
        let consumer = producer.clone();
        let two = sites(&[0, 1]);
        let run = |prod: &Upstream<'_>, cons: &JoinAggSpec, k: usize, devs: &[SiteId]| {
            preamble(prod, cons, k, DType::F32, devs).unwrap_err().to_string()
        };
        let good = Upstream::Spec { spec: &producer, output: 0, placement: &two };
        assert!(preamble(&good, &consumer, 0, DType::F32, &two).is_ok());
        assert!(run(&good, &consumer, 0, &[]).contains("device list is empty"));
        assert!(run(&good, &consumer, 1, &two).contains("no input 1"));
        assert!(run(&good, &consumer, 0, &sites(&[0, 1, 2])).contains("2 function specs but there are 3 devices"));
        let bad_output = Upstream::Spec { spec: &producer, output: 3, placement: &two };
        assert!(run(&bad_output, &consumer, 0, &two).contains("no output 3"));
        let short = Upstream::Spec { spec: &producer, output: 0, placement: &two[..1] };
        assert!(run(&short, &consumer, 0, &two).contains("2 function specs but 1 sites"));
        let elsewhere = sites(&[0, 5]);
        let off = Upstream::Spec { spec: &producer, output: 0, placement: &elsewhere };
        assert!(run(&off, &consumer, 0, &two).contains("site 5"));
        let gap = JoinAggSpec {
            functions: vec![one(halves[0].clone(), halves[0].clone()), one(tt(&[5], &[8]), tt(&[5], &[8]))],
        };
        let gapped = Upstream::Spec { spec: &gap, output: 0, placement: &two };
        assert!(run(&gapped, &consumer, 0, &two).contains("do not tile"));
        let outside =
            JoinAggSpec { functions: vec![one(tt(&[0], &[9]), whole.clone()), one(halves[1].clone(), whole)] };
        assert!(run(&good, &outside, 0, &two).contains("not inside the tensor [0..8]"));
        let empty =
            JoinAggSpec { functions: vec![one(tt(&[3], &[3]), halves[0].clone()), consumer.functions[1].clone()] };
        assert!(run(&good, &empty, 0, &two).contains("empty"));
        let flat = JoinAggSpec { functions: vec![one(tt(&[0, 0], &[1, 1]), halves[0].clone()); 2] };
        assert!(run(&good, &flat, 0, &two).contains("rank 2"));
        assert!(run(&good, &JoinAggSpec { functions: vec![] }, 0, &two).contains("consumer spec has no function spec"));
        let tiling = Tiling::grid(&TensorType::zero_bounded(&[8]), &[vec![4]]).unwrap();
        let input = Upstream::Input { tiling: &tiling, sites: &two[..1] };
        assert!(run(&input, &consumer, 0, &two).contains("2 blocks but 1 sites"));
    }

    /// A row-wise aggregation keeps the rows of shared producer blocks whole: a consumer
    /// that splits the last index gets the atoms its block meets, each counting its
    /// statistics column, while an elementwise one cuts them.
    #[test]
    fn row_wise_aggregations_keep_the_rows_of_shared_blocks_whole() {
        // Producer: 4 function specs, two per box of 2 rows × 8 columns (a key split of 2).
        let rows = [tt(&[0, 0], &[2, 8]), tt(&[2, 0], &[4, 8])];
        let f = |b: &TensorType| FunctionSpec { inputs: vec![], outputs: vec![b.clone()] };
        let producer = JoinAggSpec { functions: vec![f(&rows[0]), f(&rows[0]), f(&rows[1]), f(&rows[1])] };
        // Consumer: the columns in quarters.
        let g = |b: TensorType| FunctionSpec { inputs: vec![b], outputs: vec![] };
        let consumer = JoinAggSpec { functions: (0..4).map(|c| g(tt(&[0, 2 * c], &[4, 2 * c + 2]))).collect() };
        let four = sites(&[0, 1, 2, 3]);
        let up = Upstream::Spec { spec: &producer, output: 0, placement: &four };
        let sum = preamble_with(&up, &consumer, 0, DType::F32, &four, Aggregation::Sum).unwrap();
        assert_eq!(sum, preamble(&up, &consumer, 0, DType::F32, &four).unwrap());
        assert_eq!(sum.atoms.len(), 8);
        assert!(sum.atoms.iter().all(|a| !a.widened));
        let soft = preamble_with(&up, &consumer, 0, DType::F32, &four, Aggregation::Softmax).unwrap();
        assert_eq!(soft.atoms.iter().map(|a| a.block.clone()).collect::<Vec<_>>(), rows);
        assert!(soft.atoms.iter().all(|a| a.widened && a.buffer_type().dim(1) == Interval { lo: 0, hi: 9 }));
        assert!(soft.consumers.iter().all(|c| c.atoms == vec![0, 1]));
        // Sizes: 2 rows of 8 values and the statistics column, f32, per copy.
        assert!(soft.program.inputs.values().all(|i| (i.size_gb - 2.0 * 9.0 * 4.0 / 1e9).abs() < 1e-18));
        assert_eq!(soft.max_chunks(), 2);
        let halves = soft.refined(2).unwrap();
        assert!(halves.atoms.iter().all(|a| a.block.dim(1) == Interval { lo: 0, hi: 8 } && a.block.dim(0).len() == 1));
        // A box one function spec produces alone is final: cut as under a sum.
        let single = JoinAggSpec { functions: vec![f(&rows[0]), f(&rows[1])] };
        let two = sites(&[0, 1]);
        let cons2 = JoinAggSpec { functions: (0..2).map(|c| g(tt(&[0, 4 * c], &[4, 4 * c + 4]))).collect() };
        let up1 = Upstream::Spec { spec: &single, output: 0, placement: &two };
        assert_eq!(
            preamble_with(&up1, &cons2, 0, DType::F32, &two, Aggregation::Softmax).unwrap(),
            preamble(&up1, &cons2, 0, DType::F32, &two).unwrap()
        );
        // A producer bound inside a shared block's row is refused.
        let cut = JoinAggSpec {
            functions: vec![f(&rows[0]), f(&rows[0]), f(&tt(&[2, 0], &[4, 3])), f(&tt(&[2, 3], &[4, 8]))],
        };
        let up = Upstream::Spec { spec: &cut, output: 0, placement: &four };
        assert!(matches!(
            preamble_with(&up, &consumer, 0, DType::F32, &four, Aggregation::Softmax),
            Err(PreambleError::RowCut { .. })
        ));
    }
}
