//! Small, fixed task graphs for tests: one place that builds them, so the core's tests and
//! every backend's tests exercise the same graph.

use super::{Boundary, DeviceId, Task, TaskGraph};
use crate::{DType, Interval, TensorType};

/// The smallest task graph with a cross-device transfer, for backends' and the core's tests.
///
/// Two devices; input `x` and saved output `y` are both `f32[0..4)`. The buffers are
/// `0`: `x[0..2)` on device 0, `1`: `x[2..4)` on device 1, `2`: `[2..4)` on device 0 and
/// `3`: `[0..4)` on device 0. The tasks, in order: `0` "load a" loads buffer 0, `1`
/// "load b" loads buffer 1, `2` "move b" transfers buffer 1 to buffer 2, `3` "stitch"
/// stitches buffers 0 and 2 into buffer 3, `4` "store" stores buffer 3 as `y`. So running
/// it returns `x` unchanged, moves 8 bytes, and uses one stream per device.
pub fn two_device_gather() -> TaskGraph {
    let whole = TensorType::zero_bounded(&[4]);
    let half = |lo: usize| TensorType::from_intervals(vec![Interval { lo, hi: lo + 2 }]);
    let io = |n: &str| Boundary { name: n.into(), ty: whole.clone(), dtype: DType::F32 };
    let mut g = TaskGraph::new(2, vec![io("x")], vec![io("y")]);
    let a = g.add_buffer(DeviceId(0), half(0), DType::F32);
    let b = g.add_buffer(DeviceId(1), half(2), DType::F32);
    let b0 = g.add_buffer(DeviceId(0), half(2), DType::F32);
    let y = g.add_buffer(DeviceId(0), whole, DType::F32);
    let tasks = [
        (Task::Load { input: 0, dst: a }, "load a"),
        (Task::Load { input: 0, dst: b }, "load b"),
        (Task::Transfer { src: b, dst: b0 }, "move b"),
        (Task::Stitch { srcs: vec![a, b0], dst: y }, "stitch"),
        (Task::Store { output: 0, src: y }, "store"),
    ];
    for (task, label) in tasks {
        // Fixed tasks on fixed buffers, each valid when pushed in this order.
        g.push(task, &[], label).expect("the two-device gather is a well-formed task graph");
    }
    g
}

/// [`two_device_gather`] with a slice on device 1 before the send. Buffers: `0` a
/// (`x[0..2)`, device 0), `1` b (`x[2..4)`, device 1), `2` c (its slice, device 1), `3` b0
/// (`[2..4)` on device 0), `4` y (`[0..4)`, device 0). Tasks: `0` load a, `1` load b, `2`
/// slice b into c, `3` move c to b0, `4` stitch a and b0 into y, `5` store y.
pub fn gather_after_a_slice() -> TaskGraph {
    let whole = TensorType::zero_bounded(&[4]);
    let half = |lo: usize| TensorType::from_intervals(vec![Interval { lo, hi: lo + 2 }]);
    let io = |n: &str| Boundary { name: n.into(), ty: whole.clone(), dtype: DType::F32 };
    let mut g = TaskGraph::new(2, vec![io("x")], vec![io("y")]);
    let a = g.add_buffer(DeviceId(0), half(0), DType::F32);
    let b = g.add_buffer(DeviceId(1), half(2), DType::F32);
    let c = g.add_buffer(DeviceId(1), half(2), DType::F32);
    let b0 = g.add_buffer(DeviceId(0), half(2), DType::F32);
    let y = g.add_buffer(DeviceId(0), whole, DType::F32);
    let tasks = [
        (Task::Load { input: 0, dst: a }, "load a"),
        (Task::Load { input: 0, dst: b }, "load b"),
        (Task::Slice { src: b, dst: c }, "slice b"),
        (Task::Transfer { src: c, dst: b0 }, "move c"),
        (Task::Stitch { srcs: vec![a, b0], dst: y }, "stitch"),
        (Task::Store { output: 0, src: y }, "store"),
    ];
    for (task, label) in tasks {
        g.push(task, &[], label).expect("the gather after a slice is a well-formed task graph");
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gather_has_the_documented_layout() {
        let g = two_device_gather();
        assert_eq!(g.devices(), 2);
        let buffers: Vec<(u32, usize, usize)> =
            g.buffers().iter().map(|b| (b.device.0, b.ty.dim(0).lo, b.ty.dim(0).hi)).collect();
        assert_eq!(buffers, [(0, 0, 2), (1, 2, 4), (0, 2, 4), (0, 0, 4)]);
        let labels: Vec<&str> = g.nodes().iter().map(|n| n.label.as_str()).collect();
        assert_eq!(labels, ["load a", "load b", "move b", "stitch", "store"]);
    }
}
