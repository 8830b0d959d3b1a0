//! What a compiled plan keeps in each device's memory, for people: which way the weights
//! are split, the largest residents of a device, and the `"memory"` object of `plan --json`.

use einsum_core::taskgraph::{DeviceId, MemoryStats, Task, TaskGraph};
use einsum_joinagg::{Computation, Node};
use einsum_logical::{LogicalPlan, format_gb};
use serde::Serialize;

/// How the plan splits the computation inputs of the first layer (inputs named `l0.*`, the
/// prefix dropped) and those outside the layers (inputs without an `l<N>.` prefix), grouped
/// by split: `d_ff=8: w_gate w_up w_down · replicated: attn_norm`. An input's split is the
/// reading operator's split restricted to the input's own dimensions; an input read by
/// operators split differently appears under each split.
pub fn weight_splits(comp: &Computation, plan: &LogicalPlan) -> String {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for (id, _, args) in comp.ops() {
        let Some(planned) = plan.ops.iter().find(|o| o.id == id) else { continue };
        for t in args {
            let Some(Node::Input { name, desc }) = comp.node(t.op) else { continue };
            let Some(name) = shown_name(name) else { continue };
            let parts: Vec<String> = desc
                .dims
                .iter()
                .map(|d| (d.name.as_str(), planned.split(&d.name)))
                .filter(|&(_, c)| c > 1)
                .map(|(n, c)| format!("{n}={c}"))
                .collect();
            let split = if parts.is_empty() { "replicated".to_string() } else { parts.join(" ") };
            match groups.iter_mut().find(|(s, _)| *s == split) {
                Some((_, names)) if names.contains(&name) => {}
                Some((_, names)) => names.push(name),
                None => groups.push((split, vec![name])),
            }
        }
    }
    groups.iter().map(|(split, names)| format!("{split}: {}", names.join(" "))).collect::<Vec<_>>().join(" · ")
}

/// The name an input is shown under in [`weight_splits`]: the first layer's without its
/// prefix, others' as they are, and `None` for the inputs of layers after the first.
fn shown_name(name: &str) -> Option<String> {
    match name.split_once('.') {
        Some(("l0", rest)) => Some(rest.to_string()),
        Some((layer, _))
            if layer.len() > 1 && layer.starts_with('l') && layer[1..].bytes().all(|b| b.is_ascii_digit()) =>
        {
            None
        }
        _ => Some(name.to_string()),
    }
}

/// The `n` computation inputs with the most bytes resident on `device`, largest first, as
/// (name, bytes).
pub fn largest_residents(graph: &TaskGraph, device: DeviceId, n: usize) -> Vec<(String, usize)> {
    let mut bytes = vec![0usize; graph.inputs().len()];
    for node in graph.nodes() {
        if let Task::Load { input, dst } = node.task {
            let buffer = graph.buffer(dst);
            if buffer.device == device {
                bytes[input] += buffer.bytes();
            }
        }
    }
    let mut named: Vec<(String, usize)> =
        graph.inputs().iter().zip(bytes).filter(|(_, b)| *b > 0).map(|(i, b)| (i.name.clone(), b)).collect();
    named.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    named.truncate(n);
    named
}

/// The device with the highest peak (the lowest index among equals).
pub fn fullest_device(stats: &MemoryStats) -> DeviceId {
    let best = stats.peak_bytes.iter().enumerate().max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(&a.0)));
    DeviceId(best.map_or(0, |(d, _)| d as u32))
}

/// The `"memory"` object of `plan --json` and `explain --json`: what each device of the
/// compiled task graph holds against the capacity and the budget it was planned for.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemoryReport {
    /// The smallest HBM capacity among the devices, in bytes (a float: topology files give
    /// it in GB).
    pub capacity_bytes: f64,
    /// The memory budget per device the plan had to fit, in bytes.
    pub budget_bytes: f64,
    /// Per device, the bytes of computation inputs resident for the executable's lifetime.
    pub resident_bytes: Vec<usize>,
    /// Per device, the peak bytes: resident plus the transient peak.
    pub peak_bytes: Vec<usize>,
}

impl MemoryReport {
    /// The report of a task graph's memory `stats` under `capacity` and `budget` (bytes).
    pub fn new(stats: &MemoryStats, capacity: f64, budget: f64) -> Self {
        MemoryReport {
            capacity_bytes: capacity,
            budget_bytes: budget,
            resident_bytes: stats.resident_bytes.clone(),
            peak_bytes: stats.peak_bytes.clone(),
        }
    }
}

/// The text report: the budget, every device's peak, and the fullest device's resident and
/// transient parts with its largest residents.
pub fn memory_text(graph: &TaskGraph, stats: &MemoryStats, capacity: f64, budget: f64) -> String {
    let fullest = fullest_device(stats);
    let d = fullest.0 as usize;
    let peaks: Vec<String> = stats.peak_bytes.iter().map(|&b| format!("{:.2}", b as f64 / 1e9)).collect();
    let largest: Vec<String> =
        largest_residents(graph, fullest, 5).iter().map(|(n, b)| format!("{n} {}", format_gb(*b as f64))).collect();
    format!(
        "memory: budget {} per device ({} HBM); peak per device (GB): {}\n\
         fullest, {fullest}: {} resident + {} transient = {}; largest residents: {}\n",
        format_gb(budget),
        format_gb(capacity),
        peaks.join(" "),
        format_gb(stats.resident_bytes.get(d).copied().unwrap_or(0) as f64),
        format_gb(stats.transient_peak_bytes.get(d).copied().unwrap_or(0) as f64),
        format_gb(stats.peak_bytes.get(d).copied().unwrap_or(0) as f64),
        if largest.is_empty() { "none".to_string() } else { largest.join(", ") },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_layer_and_the_head_are_shown_and_later_layers_are_not() {
        assert_eq!(shown_name("l0.wq").as_deref(), Some("wq"));
        assert_eq!(shown_name("l12.wq"), None);
        assert_eq!(shown_name("lm_head").as_deref(), Some("lm_head"));
        assert_eq!(shown_name("x").as_deref(), Some("x"));
        assert_eq!(shown_name("left.w").as_deref(), Some("left.w"));
    }
}
