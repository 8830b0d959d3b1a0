//! Errors of topologies and of the simulator; every message says what and where.

use crate::task::SimTaskId;
use crate::topology::SiteId;

/// Why a topology could not be built, loaded or named.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TopologyError {
    /// A field of the topology description is missing, mistyped or out of range. `path` is
    /// the field as the JSON format names it, e.g. `links[3].gbps`.
    #[error("{path}: {message}")]
    Field {
        /// The offending field, e.g. `sites[2].hbm_gbps` or `links[3].a`.
        path: String,
        /// What was expected.
        message: String,
    },
    /// Two distinct sites with no link between them and no `fallback` to carry their traffic.
    #[error("no route from site {src} to site {dst}: no link joins them and the topology has no `fallback`")]
    Unroutable {
        /// The sending site.
        src: SiteId,
        /// The receiving site.
        dst: SiteId,
    },
    /// The text is not JSON.
    #[error("line {line}, column {column}: invalid JSON: {message}")]
    Syntax {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// A topology file could not be read.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// The operating system's message.
        message: String,
    },
    /// A topology file's contents are invalid; `source` says where inside it.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: String,
        /// What is wrong with its contents.
        source: Box<TopologyError>,
    },
    /// `Topology::preset` was given a name that is not a preset.
    #[error("unknown topology preset `{name}`; presets: {known}")]
    UnknownPreset {
        /// The name given.
        name: String,
        /// The preset names and forms, comma-separated.
        known: String,
    },
    /// A preset of `N` nodes (`dgx-a100xN`) was given a number of nodes it cannot build:
    /// 0, or more than the supported sites hold.
    #[error("topology preset `{name}`: {reason}")]
    PresetSize {
        /// The name given.
        name: String,
        /// Why the number of nodes is refused.
        reason: String,
    },
}

impl TopologyError {
    /// A [`TopologyError::Field`] error.
    pub(crate) fn field(path: impl Into<String>, message: impl Into<String>) -> Self {
        TopologyError::Field { path: path.into(), message: message.into() }
    }
}

/// Why a task graph could not be simulated on a topology. The simulator never hangs or
/// panics on a bad graph: it returns one of these.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// A dependency names a task that does not exist.
    #[error("task {task} (`{label}`): dependency {dep} does not exist ({count} tasks)")]
    UnknownDependency {
        /// The task with the bad dependency.
        task: SimTaskId,
        /// Its label.
        label: String,
        /// The missing task.
        dep: SimTaskId,
        /// How many tasks the graph has.
        count: usize,
    },
    /// A task names a site the topology does not have.
    #[error("task {task} (`{label}`): site {site} is out of range (the topology has {sites} sites)")]
    UnknownSite {
        /// The task.
        task: SimTaskId,
        /// Its label.
        label: String,
        /// The bad site.
        site: SiteId,
        /// How many sites the topology has.
        sites: usize,
    },
    /// A transfer or multicast sends to its own source.
    #[error("task {task} (`{label}`): sends from site {site} to itself")]
    SameSite {
        /// The task.
        task: SimTaskId,
        /// Its label.
        label: String,
        /// The site.
        site: SiteId,
    },
    /// A multicast lists a destination twice.
    #[error("task {task} (`{label}`): destination {site} is listed twice")]
    DuplicateDestination {
        /// The task.
        task: SimTaskId,
        /// Its label.
        label: String,
        /// The repeated destination.
        site: SiteId,
    },
    /// A byte count is negative, NaN or infinite.
    #[error("task {task} (`{label}`): {field} must be a finite number >= 0, got {value}")]
    InvalidBytes {
        /// The task.
        task: SimTaskId,
        /// Its label.
        label: String,
        /// Which count (`bytes`, `read_bytes`, `write_bytes`, or a kernel's `seconds`).
        field: &'static str,
        /// The value given.
        value: f64,
    },
    /// A roofline efficiency outside `(0, 1]` ([`crate::Roofline::validate`]).
    #[error("roofline efficiency {class}.{field} must lie in (0, 1], got {value}")]
    InvalidEfficiency {
        /// The kernel class (`matmul`, `attention`, `elementwise`, `copy`).
        class: &'static str,
        /// `compute` or `memory`.
        field: &'static str,
        /// The value given.
        value: f64,
    },
    /// The dependencies form a cycle, so no task on it could ever start.
    #[error("dependency cycle: {}", cycle_text(.tasks, .labels))]
    Cycle {
        /// The tasks of one cycle, each depending on the next; the last depends on the first.
        tasks: Vec<SimTaskId>,
        /// Their labels, in the same order.
        labels: Vec<String>,
    },
}

fn cycle_text(tasks: &[SimTaskId], labels: &[String]) -> String {
    let mut parts: Vec<String> = tasks.iter().zip(labels).map(|(t, l)| format!("{t} (`{l}`)")).collect();
    if let (Some(first), Some(label)) = (tasks.first(), labels.first()) {
        parts.push(format!("{first} (`{label}`)"));
    }
    parts.join(" needs ")
}
