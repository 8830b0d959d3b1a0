//! Which buffers are views of another buffer's memory, decided once when a graph is
//! prepared: slices, transfers and stitches that copy nothing.
//!
//! # Design
//! Every virtual device is host memory and blocks are immutable, so a task that only
//! re-addresses elements needs no copy: a transfer shares its source, a slice is a view of
//! its source ([`HostTensor::view`]), and a stitch whose parts are all views of one block is
//! a view of that block too ([`HostTensor::stitch`]). Each buffer therefore reads the memory
//! of a *root*: itself when its task writes new elements (a kernel, an aggregation, a copying
//! slice or stitch, a load), else its source's root. The arena ([`crate::arena_plan`]) gives
//! slots to roots only, and keeps a root alive while any buffer viewing it is.
//!
//! A slice is a view when its elements are one contiguous run of its root (a range of rows:
//! every reader borrows it as it is), or, strided, when no kernel reads it (directly or
//! after transfers): stitches and aggregations read strided views in place, where a copy
//! would move the elements twice. A strided slice that a kernel reads is copied once into a
//! compact block, since the kernel would otherwise gather it on every read.

use einsum_core::{
    contiguous_run,
    taskgraph::{BufferId, Task, TaskGraph},
};

/// The views of a graph: per buffer, the root whose memory it reads, and whether each
/// slice is a view.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Views {
    /// Per buffer, the buffer whose elements it reads (itself for a root).
    pub(crate) root: Vec<BufferId>,
    /// Per buffer written by a `Slice`, whether the slice is a view (no copy).
    pub(crate) slice_view: Vec<bool>,
}

impl Views {
    /// Decides the views of `graph` (see the module docs).
    pub(crate) fn of(graph: &TaskGraph) -> Self {
        let n = graph.buffers().len();
        // Whether a kernel reads the buffer, directly or through transfers. Readers come
        // after writers in schedule order, so one backward pass sees every reader first.
        let mut kernel_reads = vec![false; n];
        for node in graph.nodes().iter().rev() {
            match &node.task {
                Task::Kernel { inputs, .. } => inputs.iter().for_each(|b| kernel_reads[b.0 as usize] = true),
                Task::Transfer { src, dst } if kernel_reads[dst.0 as usize] => kernel_reads[src.0 as usize] = true,
                _ => {}
            }
        }
        let mut root: Vec<BufferId> = (0..n as u32).map(BufferId).collect();
        let mut slice_view = vec![false; n];
        for node in graph.nodes() {
            match &node.task {
                Task::Transfer { src, dst } => root[dst.0 as usize] = root[src.0 as usize],
                Task::Slice { src, dst } => {
                    let frame = &graph.buffer(root[src.0 as usize]).ty;
                    let contiguous = contiguous_run(&graph.buffer(*dst).ty, frame).is_some();
                    if contiguous || !kernel_reads[dst.0 as usize] {
                        slice_view[dst.0 as usize] = true;
                        root[dst.0 as usize] = root[src.0 as usize];
                    }
                }
                Task::Stitch { srcs, dst } => {
                    // (A stitch of no parts, of an empty block, is a root of its own.)
                    if let Some(first) = srcs.first().map(|s| root[s.0 as usize])
                        && srcs.iter().all(|s| root[s.0 as usize] == first)
                    {
                        root[dst.0 as usize] = first;
                    }
                }
                _ => {}
            }
        }
        Self { root, slice_view }
    }

    /// Whether buffer `b` reads its own memory (it is not a view of another buffer).
    pub(crate) fn is_root(&self, b: BufferId) -> bool {
        self.root[b.0 as usize] == b
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::{
        DType, TensorType,
        taskgraph::{Boundary, DeviceId},
    };

    use super::*;

    fn tt(lo: &[usize], hi: &[usize]) -> TensorType {
        TensorType::new(lo, hi).unwrap()
    }

    /// Row slices are views; a column slice is a view when only stitches read it, a copy
    /// when a kernel reads it after a transfer; a stitch of views of one root is a view, of
    /// two roots a copy.
    #[test]
    fn views_follow_contiguity_and_readers() {
        let whole = tt(&[0, 0], &[4, 4]);
        let io = Boundary { name: "x".into(), ty: whole.clone(), dtype: DType::F32 };
        let mut g = TaskGraph::new(2, vec![io.clone()], vec![io]);
        let buf = |g: &mut TaskGraph, d: u32, ty: TensorType| g.add_buffer(DeviceId(d), ty, DType::F32);
        let x = buf(&mut g, 0, whole.clone());
        g.push(Task::Load { input: 0, dst: x }, &[], "load").unwrap();
        let (top, left, right) = (
            buf(&mut g, 0, tt(&[0, 0], &[2, 4])),
            buf(&mut g, 0, tt(&[0, 0], &[4, 2])),
            buf(&mut g, 0, tt(&[0, 2], &[4, 4])),
        );
        g.push(Task::Slice { src: x, dst: top }, &[], "rows").unwrap();
        g.push(Task::Slice { src: x, dst: left }, &[], "left").unwrap();
        g.push(Task::Slice { src: x, dst: right }, &[], "right").unwrap();
        let left1 = buf(&mut g, 1, tt(&[0, 0], &[4, 2]));
        g.push(Task::Transfer { src: left, dst: left1 }, &[], "send").unwrap();
        let y = buf(&mut g, 1, tt(&[0, 0], &[4, 2]));
        g.push(Task::Kernel { kernel: 0, inputs: vec![left1], outputs: vec![y] }, &[], "kernel").unwrap();
        let bottom = buf(&mut g, 0, tt(&[2, 0], &[4, 4]));
        g.push(Task::Slice { src: x, dst: bottom }, &[], "bottom rows").unwrap();
        let back = buf(&mut g, 0, whole.clone());
        g.push(Task::Stitch { srcs: vec![top, bottom], dst: back }, &[], "one root").unwrap();
        let apart = buf(&mut g, 0, whole.clone());
        g.push(Task::Stitch { srcs: vec![left, right], dst: apart }, &[], "left is a copy").unwrap();
        let y0 = buf(&mut g, 0, tt(&[0, 0], &[4, 2]));
        g.push(Task::Transfer { src: y, dst: y0 }, &[], "return").unwrap();
        let mixed = buf(&mut g, 0, whole.clone());
        g.push(Task::Stitch { srcs: vec![y0, right], dst: mixed }, &[], "two roots").unwrap();
        g.push(Task::Store { output: 0, src: mixed }, &[], "store").unwrap();
        let v = Views::of(&g);
        assert!(v.slice_view[top.0 as usize] && v.root[top.0 as usize] == x);
        assert!(!v.slice_view[left.0 as usize] && v.is_root(left), "a kernel reads it after a transfer");
        assert!(v.slice_view[right.0 as usize] && v.root[right.0 as usize] == x);
        assert_eq!(v.root[left1.0 as usize], left);
        assert_eq!(v.root[back.0 as usize], x);
        assert!(v.is_root(apart), "left is a root of its own, right a view of x");
        assert!(v.is_root(mixed) && v.is_root(y) && v.root[y0.0 as usize] == y);
    }
}
