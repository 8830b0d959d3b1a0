//! The resident plan: where the computation inputs live on the GPUs, for the executable's
//! lifetime.
//!
//! Every `Task::Load` selects a block of a computation input for a virtual device. The
//! buffer it fills is not in the per-run pool ([`crate::pool`]): it lives in one *resident
//! region* per GPU, planned here at prepare time, filled once by
//! [`crate::CudaExecutable::load`] (the block sliced on the host, copied in its storage
//! dtype) and read by every run. A Load task is then a no-op in the issued work: its
//! readers read the resident bytes, and only activations move per run.
//!
//! # Design
//! Resident buffers are written only by a load, never by a run, so two Load tasks of the
//! same block of the same input whose virtual devices share a GPU share one resident block
//! (eight virtual devices on one GPU keep a replicated weight once, not eight times).
//! Offsets are fixed at prepare time, so the captured CUDA graph sees fixed addresses.

use einsum_core::taskgraph::{Task, TaskGraph};
use einsum_core::{DType, HostTensor, TensorType};

use crate::pool::ALIGN;

/// One block of a computation input held on one GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResidentBlock {
    /// The computation input it is a block of.
    pub input: usize,
    /// The GPU whose resident region holds it.
    pub gpu: usize,
    /// Byte offset in that region (a multiple of [`ALIGN`]).
    pub offset: usize,
    /// The block's absolute type (a projection of the input's type).
    pub ty: TensorType,
    /// Its storage dtype (the input's).
    pub dtype: DType,
}

impl ResidentBlock {
    /// Bytes of storage.
    pub fn bytes(&self) -> usize {
        self.ty.volume() * self.dtype.size_bytes()
    }
}

/// Where every Load destination lives: a block of a resident region per GPU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResidentPlan {
    /// The resident blocks, in the order their first Load task appears.
    pub blocks: Vec<ResidentBlock>,
    /// For every buffer of the task graph, the resident block holding it (`None`: the buffer
    /// lives in its GPU's pool).
    pub buffer_block: Vec<Option<usize>>,
    /// For every computation input, its resident blocks (indices into `blocks`).
    pub input_blocks: Vec<Vec<usize>>,
    /// Bytes of every GPU's resident region.
    pub bytes: Vec<usize>,
}

impl ResidentPlan {
    /// Plans the resident regions of `graph` with virtual device `v` on GPU
    /// `gpu_of_device[v]` (`gpus` GPUs).
    pub fn new(graph: &TaskGraph, gpu_of_device: &[usize], gpus: usize) -> ResidentPlan {
        ResidentPlan::of_devices(graph, gpu_of_device, &vec![true; graph.devices()], gpus)
    }

    /// [`ResidentPlan::new`] for the devices `local` marks (one rank's of a multi-process
    /// job): the Loads of other devices get no block, and their inputs' uploads skip them.
    pub fn of_devices(graph: &TaskGraph, gpu_of_device: &[usize], local: &[bool], gpus: usize) -> ResidentPlan {
        let mut plan = ResidentPlan {
            blocks: Vec::new(),
            buffer_block: vec![None; graph.buffers().len()],
            input_blocks: vec![Vec::new(); graph.inputs().len()],
            bytes: vec![0; gpus.max(1)],
        };
        for node in graph.nodes() {
            let Task::Load { input, dst } = &node.task else { continue };
            let buf = graph.buffer(*dst);
            if local.get(buf.device.0 as usize) == Some(&false) {
                continue;
            }
            let gpu = gpu_of_device.get(buf.device.0 as usize).copied().unwrap_or(0);
            let same = |b: &ResidentBlock| b.gpu == gpu && b.ty == buf.ty && b.dtype == buf.dtype;
            let block = match plan.input_blocks[*input].iter().copied().find(|&k| same(&plan.blocks[k])) {
                Some(k) => k,
                None => {
                    let offset = plan.bytes[gpu];
                    let block = ResidentBlock { input: *input, gpu, offset, ty: buf.ty.clone(), dtype: buf.dtype };
                    plan.bytes[gpu] += block.bytes().max(1).div_ceil(ALIGN) * ALIGN;
                    plan.blocks.push(block);
                    plan.input_blocks[*input].push(plan.blocks.len() - 1);
                    plan.blocks.len() - 1
                }
            };
            plan.buffer_block[dst.0 as usize] = Some(block);
        }
        plan
    }

    /// The GPU and resident byte offset of buffer `b`, when it is a Load destination.
    pub fn location(&self, b: usize) -> Option<(usize, usize)> {
        let k = self.buffer_block.get(b).copied().flatten()?;
        Some((self.blocks[k].gpu, self.blocks[k].offset))
    }

    /// The bytes to upload for input `input` with value `value` (whose type and dtype the
    /// caller has checked): for every resident block of the input, its GPU, offset and
    /// storage bytes, sliced on the host one block at a time.
    pub fn uploads<'a>(
        &'a self,
        input: usize,
        value: &'a HostTensor,
    ) -> impl Iterator<Item = Result<(usize, usize, Vec<u8>), String>> + 'a {
        self.input_blocks[input].iter().map(move |&k| {
            let b = &self.blocks[k];
            let part = value.slice(&b.ty).map_err(|e| format!("slicing block {}: {e}", b.ty))?;
            Ok((b.gpu, b.offset, part.to_ne_bytes()))
        })
    }

    /// The bytes to write for a part `part` of input `input` (whose type lies in the input's
    /// and whose dtype is the input's, as the caller has checked): for every resident block
    /// of the input that meets the part, each contiguous run of their intersection in the
    /// block's storage, as its GPU, byte offset and bytes. The runs are the part's, not the
    /// block's: one row of a cache costs that row on every block holding it.
    pub fn writes<'a>(
        &'a self,
        input: usize,
        part: &'a HostTensor,
    ) -> impl Iterator<Item = Result<(usize, usize, Vec<u8>), String>> + 'a {
        self.input_blocks[input]
            .iter()
            .filter_map(move |&k| {
                let b = &self.blocks[k];
                let region = b.ty.intersect(part.ty())?;
                let bytes = match part.view(&region) {
                    Ok(piece) => piece.to_ne_bytes(),
                    Err(e) => return Some(vec![Err(format!("slicing part {} for block {}: {e}", part.ty(), b.ty))]),
                };
                let size = b.dtype.size_bytes();
                let (starts, len) = runs(&region, &b.ty);
                let chunks = starts.into_iter().zip(bytes.chunks(len * size));
                Some(chunks.map(|(at, chunk)| Ok((b.gpu, b.offset + at * size, chunk.to_vec()))).collect())
            })
            .flatten()
    }
}

/// The contiguous runs of `region` (a non-empty projection of `frame`) in a row-major block
/// over `frame`: the first element of each, in row-major order of `region`, and their common
/// length. A run spans `region` from the last dimension it does not span whole in `frame`
/// on, so there is one run per index of the dimensions before that one.
fn runs(region: &TensorType, frame: &TensorType) -> (Vec<usize>, usize) {
    let rank = region.rank();
    if rank == 0 {
        return (vec![0], 1);
    }
    let strides = frame.strides();
    let split = (0..rank).rev().find(|&d| region.dim(d) != frame.dim(d)).unwrap_or(0);
    let len = region.dim(split).len() * strides[split];
    let start = |idx: &[usize]| -> usize {
        let inner = (split..rank).map(|d| (region.dim(d).lo - frame.dim(d).lo) * strides[d]);
        idx.iter().enumerate().map(|(d, &i)| (i - frame.dim(d).lo) * strides[d]).chain(inner).sum()
    };
    let mut idx: Vec<usize> = (0..split).map(|d| region.dim(d).lo).collect();
    let mut starts = Vec::with_capacity((0..split).map(|d| region.dim(d).len()).product());
    loop {
        starts.push(start(&idx));
        // The next index of the dimensions before `split`, row-major.
        let mut d = split;
        loop {
            if d == 0 {
                return (starts, len);
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < region.dim(d).hi {
                break;
            }
            idx[d] = region.dim(d).lo;
        }
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::taskgraph::examples::two_device_gather;

    use super::*;

    #[test]
    fn load_destinations_are_resident_and_other_buffers_are_not() {
        let g = two_device_gather();
        let plan = ResidentPlan::new(&g, &[0, 1], 2);
        assert_eq!(plan.buffer_block, vec![Some(0), Some(1), None, None]);
        assert_eq!(plan.location(0), Some((0, 0)));
        assert_eq!(plan.location(1), Some((1, 0)));
        assert_eq!(plan.location(2), None);
        assert_eq!(plan.input_blocks, vec![vec![0, 1]]);
        assert_eq!(plan.bytes, vec![ALIGN, ALIGN]);
        // On one GPU the two halves sit side by side in one region.
        let one = ResidentPlan::new(&g, &[0, 0], 1);
        assert_eq!(one.location(1), Some((0, ALIGN)));
        assert_eq!(one.bytes, vec![2 * ALIGN]);
    }

    #[test]
    fn a_block_replicated_on_devices_sharing_a_gpu_is_held_once() {
        use einsum_core::taskgraph::{Boundary, DeviceId};
        let ty = TensorType::zero_bounded(&[8]);
        let x = Boundary { name: "w".into(), ty: ty.clone(), dtype: DType::BF16 };
        let mut g = TaskGraph::new(2, vec![x], vec![]);
        for d in 0..2 {
            let b = g.add_buffer(DeviceId(d), ty.clone(), DType::BF16);
            g.push(Task::Load { input: 0, dst: b }, &[], "load").unwrap();
        }
        let one = ResidentPlan::new(&g, &[0, 0], 1);
        assert_eq!(one.buffer_block, vec![Some(0), Some(0)]);
        assert_eq!(one.bytes, vec![ALIGN]);
        let two = ResidentPlan::new(&g, &[0, 1], 2);
        assert_eq!(two.buffer_block, vec![Some(0), Some(1)]);
    }

    #[test]
    fn uploads_are_the_blocks_in_storage_order() {
        let g = two_device_gather();
        let plan = ResidentPlan::new(&g, &[0, 1], 2);
        let x = HostTensor::from_f32(TensorType::zero_bounded(&[4]), DType::F32, vec![1.0, 2.0, 3.0, 4.0]).unwrap();
        let ups: Vec<_> = plan.uploads(0, &x).collect::<Result<_, _>>().unwrap();
        let floats =
            |b: &[u8]| -> Vec<f32> { b.chunks(4).map(|c| f32::from_ne_bytes(c.try_into().unwrap())).collect() };
        assert_eq!((ups[0].0, ups[0].1, floats(&ups[0].2)), (0, 0, vec![1.0, 2.0]));
        assert_eq!((ups[1].0, ups[1].1, floats(&ups[1].2)), (1, 0, vec![3.0, 4.0]));
    }

    /// A row of the middle dimension of a 3-D block is one run per outer index; a part
    /// spanning every later dimension is one run; a whole block is one run.
    #[test]
    fn runs_follow_the_block_layout() {
        let tt = |lo: &[usize], hi: &[usize]| TensorType::new(lo, hi).unwrap();
        let frame = tt(&[0, 2, 0], &[3, 6, 5]);
        assert_eq!(runs(&tt(&[0, 3, 0], &[3, 4, 5]), &frame), (vec![5, 25, 45], 5));
        assert_eq!(runs(&tt(&[1, 2, 1], &[2, 4, 3]), &frame), (vec![21, 26], 2));
        assert_eq!(runs(&tt(&[1, 2, 0], &[3, 6, 5]), &frame), (vec![20], 40));
        assert_eq!(runs(&frame, &frame), (vec![0], 60));
        assert_eq!(runs(&TensorType::zero_bounded(&[]), &TensorType::zero_bounded(&[])), (vec![0], 1));
    }

    /// A part meeting one half of a split input is written to that half's block alone, one
    /// run per row it covers, at the block's offset.
    #[test]
    fn writes_are_the_parts_runs_in_the_blocks_it_meets() {
        let g = two_device_gather();
        let plan = ResidentPlan::new(&g, &[0, 0], 1);
        let part = HostTensor::from_f32(TensorType::new(&[3], &[4]).unwrap(), DType::F32, vec![9.0]).unwrap();
        let writes: Vec<_> = plan.writes(0, &part).collect::<Result<_, _>>().unwrap();
        assert_eq!(writes, vec![(0, ALIGN + 4, 9.0f32.to_ne_bytes().to_vec())]);
    }
}
