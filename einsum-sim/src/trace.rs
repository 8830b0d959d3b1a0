//! The simulator's output: when each task ran, on which resources, and how busy each
//! resource was.

use std::fmt;

use crate::task::{SimTaskId, TaskKind};
use crate::topology::{ResourceId, SiteId};

/// When one task ran. Times in seconds from the start of the graph.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskTrace {
    /// The task's label.
    pub label: String,
    /// The task itself.
    pub kind: TaskKind,
    /// When its last dependency ended (0 without dependencies).
    pub start: f64,
    /// When its last flow ended (`start` for a task that moves no bytes).
    pub end: f64,
    /// The resources its flows cross, each once, in route order.
    pub resources: Vec<ResourceId>,
    /// For transfers and multicasts: when each destination had all the bytes.
    pub deliveries: Vec<(SiteId, f64)>,
}

impl TaskTrace {
    /// `end - start`.
    pub fn duration(&self) -> f64 {
        self.end - self.start
    }
}

/// How much one resource was used.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceUsage {
    /// The resource's name ([`crate::Resource::name`], or `compute[s]` for site `s`'s
    /// compute).
    pub name: String,
    /// Its capacity in bytes/s (1 for a compute resource: one second of work per second).
    pub capacity: f64,
    /// Seconds during which at least one flow crossed it.
    pub busy_time: f64,
    /// Bytes that crossed it (a multicast's bytes count once per destination it carries); for
    /// a compute resource, the seconds of kernel work done on it.
    pub bytes: f64,
}

/// The result of a simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub(crate) completion: f64,
    pub(crate) transfer_time: f64,
    pub(crate) tasks: Vec<TaskTrace>,
    pub(crate) usage: Vec<ResourceUsage>,
}

impl Trace {
    /// Seconds until the last task ended (0 for an empty graph).
    pub fn completion(&self) -> f64 {
        self.completion
    }

    /// [`Trace::completion`] in milliseconds.
    pub fn completion_ms(&self) -> f64 {
        self.completion * 1e3
    }

    /// Seconds during which at least one transfer or multicast was running: the measure of
    /// the union of their `[start, end]` intervals (overlapping transfers count once).
    pub fn transfer_time(&self) -> f64 {
        self.transfer_time
    }

    /// [`Trace::transfer_time`] in milliseconds.
    pub fn transfer_time_ms(&self) -> f64 {
        self.transfer_time * 1e3
    }

    /// Every task's trace, indexed by [`SimTaskId`].
    pub fn tasks(&self) -> &[TaskTrace] {
        &self.tasks
    }

    /// One task's trace, or `None` when out of range.
    pub fn task(&self, id: SimTaskId) -> Option<&TaskTrace> {
        self.tasks.get(id.0)
    }

    /// Every resource's usage, indexed by [`ResourceId`] of the simulated topology, followed
    /// by one `compute[s]` entry per site `s` (index `topology.resources().len() + s`).
    pub fn resource_usage(&self) -> &[ResourceUsage] {
        &self.usage
    }

    /// One resource's usage, or `None` when out of range.
    pub fn usage(&self, id: ResourceId) -> Option<&ResourceUsage> {
        self.usage.get(id.0)
    }

    /// Bytes through the resource called `name` (e.g. `"pcie-bridge"`); 0 when the
    /// topology has no such resource.
    pub fn bytes_through(&self, name: &str) -> f64 {
        self.usage.iter().filter(|u| u.name == name).fold(0.0, |acc, u| acc + u.bytes)
    }
}

/// The measure of the union of closed intervals.
pub(crate) fn union_length(mut intervals: Vec<(f64, f64)>) -> f64 {
    intervals.retain(|(a, b)| b > a);
    intervals.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mut total = 0.0;
    let mut current: Option<(f64, f64)> = None;
    for (a, b) in intervals {
        current = match current {
            Some((s, e)) if a <= e => Some((s, e.max(b))),
            Some((s, e)) => {
                total += e - s;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    if let Some((s, e)) = current {
        total += e - s;
    }
    total
}

/// A table for people: every task with its interval in ms and its resources, then every
/// resource that carried bytes.
impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "completion {:.3} ms, transfers {:.3} ms", self.completion_ms(), self.transfer_time_ms())?;
        let width = self.tasks.iter().map(|t| t.label.chars().count()).max().unwrap_or(0);
        for (i, t) in self.tasks.iter().enumerate() {
            let names: Vec<&str> =
                t.resources.iter().filter_map(|r| self.usage.get(r.0)).map(|u| u.name.as_str()).collect();
            writeln!(
                f,
                "  #{i:<3} {:<width$}  {:>9.3} .. {:>9.3} ms  {}",
                t.label,
                t.start * 1e3,
                t.end * 1e3,
                names.join(", ")
            )?;
        }
        for u in self.usage.iter().filter(|u| u.bytes > 0.0) {
            if u.name.starts_with("compute[") {
                writeln!(f, "  {:<16} {:>10.3} ms of work  busy {:>9.3} ms", u.name, u.bytes * 1e3, u.busy_time * 1e3)?;
            } else {
                writeln!(f, "  {:<16} {:>10.3} GB  busy {:>9.3} ms", u.name, u.bytes / 1e9, u.busy_time * 1e3)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_of_intervals() {
        assert_eq!(union_length(vec![]), 0.0);
        assert_eq!(union_length(vec![(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (5.5, 5.7), (4.0, 4.0)]), 4.0);
        assert_eq!(union_length(vec![(3.0, 4.0), (0.0, 1.0), (1.0, 2.0)]), 3.0);
    }
}
