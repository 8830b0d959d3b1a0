//! The messages between ranks: the transfers of a task graph whose two devices belong to
//! different ranks, and the bytes they carry per pair of ranks.
//!
//! A transfer inside a rank stays a device-to-device copy; one across ranks becomes a
//! point-to-point message, tagged with its position in [`cross_rank`]'s list, so that both
//! ranks derive the same tag from the same graph without talking.

use einsum_core::taskgraph::{BufferId, DeviceId, Task, TaskGraph, TaskId};
use thiserror::Error;

use crate::RankLayout;

/// Why a task graph cannot be split over a rank layout.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TrafficError {
    /// A task uses a buffer on a device that no rank owns.
    #[error("task {task} (`{label}`) uses buffer {buffer} on {device}, but the layout has only {devices} devices")]
    DeviceOutsideLayout {
        /// The task.
        task: u32,
        /// Its label.
        label: String,
        /// The buffer.
        buffer: u32,
        /// Its device.
        device: DeviceId,
        /// The layout's devices.
        devices: usize,
    },
}

/// Checks that every buffer a task of `graph` reads or writes is on a device of `layout`.
fn check_devices(graph: &TaskGraph, layout: &RankLayout) -> Result<(), TrafficError> {
    for (t, node) in graph.nodes().iter().enumerate() {
        for &b in node.task.read_buffers().iter().chain(node.task.written_buffers()) {
            let device = graph.buffer(b).device;
            if device.0 as usize >= layout.devices() {
                return Err(TrafficError::DeviceOutsideLayout {
                    task: t as u32,
                    label: node.label.clone(),
                    buffer: b.0,
                    device,
                    devices: layout.devices(),
                });
            }
        }
    }
    Ok(())
}

/// The crossing transfers with their source and destination buffers, in task order.
fn crossing(graph: &TaskGraph, layout: &RankLayout) -> Result<Vec<(TaskId, BufferId, BufferId)>, TrafficError> {
    check_devices(graph, layout)?;
    let rank = |b: BufferId| layout.rank_of(graph.buffer(b).device.0 as usize);
    Ok(graph
        .nodes()
        .iter()
        .enumerate()
        .filter_map(|(t, node)| match node.task {
            Task::Transfer { src, dst } if rank(src) != rank(dst) => Some((TaskId(t as u32), src, dst)),
            _ => None,
        })
        .collect())
}

/// The transfer tasks of `graph` between devices of different ranks, in task order: the
/// messages an MPI backend sends, message `i` tagged `i`. Refused when a task uses a device
/// the layout does not have.
pub fn cross_rank(graph: &TaskGraph, layout: &RankLayout) -> Result<Vec<TaskId>, TrafficError> {
    Ok(crossing(graph, layout)?.into_iter().map(|(t, _, _)| t).collect())
}

/// Bytes each rank sends to each other rank: entry `[from][to]` sums the bytes of the
/// buffers sent by the transfers from a device of rank `from` to a device of rank `to`
/// (the diagonal is zero: transfers inside a rank are no messages). Refused when a task uses
/// a device the layout does not have.
pub fn inter_rank_bytes(graph: &TaskGraph, layout: &RankLayout) -> Result<Vec<Vec<u64>>, TrafficError> {
    let mut bytes = vec![vec![0u64; layout.ranks()]; layout.ranks()];
    for (_, src, dst) in crossing(graph, layout)? {
        let from = layout.rank_of(graph.buffer(src).device.0 as usize);
        let to = layout.rank_of(graph.buffer(dst).device.0 as usize);
        bytes[from][to] += graph.buffer(src).bytes() as u64;
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use einsum_core::taskgraph::{Boundary, examples};
    use einsum_core::{DType, TensorType};

    use super::*;

    /// Four devices and two inputs, `x: f32[8, 4]` and `h: f16[8, 4]`. Buffers: `0` all of `x`
    /// on device 0, `1` all of `x` on device 1 (8 * 4 * 4 = 128 bytes each), `2` rows 0..2 of
    /// `h` on device 0, `3` the same on device 3 (2 * 4 * 2 = 16 bytes each). Tasks 0..4 load
    /// them; then the transfers, in task order: 4 `x 0->1` (128 B), 5 `x 1->2` (128 B), 6
    /// `h 3->0` (16 B), 7 `x 2->3` (128 B), 8 `h 0->2` (16 B), 9 `x 3->2` (128 B).
    fn four_devices() -> TaskGraph {
        let x = TensorType::zero_bounded(&[8, 4]);
        let h_rows = TensorType::from_intervals(vec![
            einsum_core::Interval { lo: 0, hi: 2 },
            einsum_core::Interval { lo: 0, hi: 4 },
        ]);
        let inputs = vec![
            Boundary { name: "x".into(), ty: x.clone(), dtype: DType::F32 },
            Boundary { name: "h".into(), ty: x.clone(), dtype: DType::F16 },
        ];
        let mut g = TaskGraph::new(4, inputs, vec![]);
        let xs: Vec<BufferId> = (0..2).map(|d| g.add_buffer(DeviceId(d), x.clone(), DType::F32)).collect();
        let hs: Vec<BufferId> = [0, 3].map(|d| g.add_buffer(DeviceId(d), h_rows.clone(), DType::F16)).to_vec();
        let push = |g: &mut TaskGraph, task: Task, label: &str| g.push(task, &[], label).expect("well-formed");
        push(&mut g, Task::Load { input: 0, dst: xs[0] }, "load x 0");
        push(&mut g, Task::Load { input: 0, dst: xs[1] }, "load x 1");
        push(&mut g, Task::Load { input: 1, dst: hs[0] }, "load h 0");
        push(&mut g, Task::Load { input: 1, dst: hs[1] }, "load h 3");
        let moved = |g: &mut TaskGraph, src: BufferId, to: u32, label: &str| {
            let b = g.buffer(src).clone();
            let dst = g.add_buffer(DeviceId(to), b.ty, b.dtype);
            push(g, Task::Transfer { src, dst }, label);
            dst
        };
        moved(&mut g, xs[0], 1, "x 0->1");
        let x2 = moved(&mut g, xs[1], 2, "x 1->2");
        moved(&mut g, hs[1], 0, "h 3->0");
        let x3 = moved(&mut g, x2, 3, "x 2->3");
        moved(&mut g, hs[0], 2, "h 0->2");
        moved(&mut g, x3, 2, "x 3->2");
        g
    }

    #[test]
    fn the_graph_is_as_documented() {
        let g = four_devices();
        let transfers: Vec<(u32, &str, usize)> = g
            .nodes()
            .iter()
            .enumerate()
            .filter_map(|(t, n)| match n.task {
                Task::Transfer { src, .. } => Some((t as u32, n.label.as_str(), g.buffer(src).bytes())),
                _ => None,
            })
            .collect();
        assert_eq!(
            transfers,
            [
                (4, "x 0->1", 128),
                (5, "x 1->2", 128),
                (6, "h 3->0", 16),
                (7, "x 2->3", 128),
                (8, "h 0->2", 16),
                (9, "x 3->2", 128)
            ]
        );
    }

    #[test]
    fn two_ranks_see_only_the_crossing_transfers() {
        let g = four_devices();
        let l = RankLayout::contiguous(4, 2).expect("even");
        // Ranks: {0, 1} and {2, 3}. Crossing: x 1->2 (0 to 1), h 3->0 (1 to 0), h 0->2 (0 to 1).
        assert_eq!(cross_rank(&g, &l), Ok(vec![TaskId(5), TaskId(6), TaskId(8)]));
        assert_eq!(inter_rank_bytes(&g, &l), Ok(vec![vec![0, 128 + 16], vec![16, 0]]));
    }

    #[test]
    fn four_ranks_see_every_transfer_and_one_rank_none() {
        let g = four_devices();
        let l = RankLayout::contiguous(4, 4).expect("even");
        assert_eq!(cross_rank(&g, &l), Ok((4..10).map(TaskId).collect()));
        assert_eq!(
            inter_rank_bytes(&g, &l),
            Ok(vec![vec![0, 128, 16, 0], vec![0, 0, 128, 0], vec![0, 0, 0, 128], vec![16, 0, 128, 0]])
        );
        let one = RankLayout::contiguous(4, 1).expect("even");
        assert_eq!(cross_rank(&g, &one), Ok(vec![]));
        assert_eq!(inter_rank_bytes(&g, &one), Ok(vec![vec![0]]));
    }

    #[test]
    fn the_gather_example_moves_eight_bytes_between_two_ranks() {
        let g = examples::two_device_gather();
        let l = RankLayout::contiguous(2, 2).expect("even");
        assert_eq!(cross_rank(&g, &l), Ok(vec![TaskId(2)]));
        assert_eq!(inter_rank_bytes(&g, &l), Ok(vec![vec![0, 0], vec![8, 0]]));
    }

    #[test]
    fn a_device_the_layout_lacks_is_refused() {
        let g = four_devices();
        let l = RankLayout::contiguous(2, 2).expect("even");
        let e = cross_rank(&g, &l).unwrap_err();
        // The first task that uses device 2 or 3: `load h 3` (task 3, buffer 3 on device 3).
        assert_eq!(
            e,
            TrafficError::DeviceOutsideLayout {
                task: 3,
                label: "load h 3".into(),
                buffer: 3,
                device: DeviceId(3),
                devices: 2
            }
        );
        assert!(e.to_string().contains("only 2 devices"), "{e}");
        assert_eq!(inter_rank_bytes(&g, &l), Err(e));
    }
}
