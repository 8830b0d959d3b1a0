//! How much host memory this process can still allocate: the one measure every estimate
//! that refuses work before allocating is compared with (the workload builders, the
//! planning pipeline, a run's inputs and buffers, the exchange-program search).
//!
//! Three limits bound an allocation on Linux, and the least of them is the room left:
//! - the system's free memory: `MemAvailable` of `/proc/meminfo` (what can be allocated
//!   without swapping, page cache included);
//! - the address-space limit (`ulimit -v`, the soft `RLIMIT_AS` of `/proc/self/limits`)
//!   less the address space already mapped (`VmSize` of `/proc/self/status`): an allocation
//!   past it fails whatever the system has free;
//! - the memory cgroup's limit less its usage, for the process's cgroup and each of its
//!   ancestors (a container's limit is usually on one of them): `memory.max` less
//!   `memory.current` on cgroup v2, `memory.limit_in_bytes` less `memory.usage_in_bytes` on
//!   the v1 memory controller; the kernel kills a cgroup that passes its limit, so no
//!   allocation failure would report it.
//!
//! Each limit that cannot be read (another system, no `/proc`, no limit set) is absent; where
//! none is known, [`available_host_memory`] is `None` and callers refuse nothing. The
//! parsers take the files' text, so that each rule is tested without the live machine.

use std::path::{Path, PathBuf};

/// What each limit on this process's allocations leaves, in bytes (`None`: no such limit, or
/// it cannot be read). See the module documentation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostMemory {
    /// `MemAvailable` of `/proc/meminfo`.
    pub mem_available: Option<usize>,
    /// The soft address-space limit less the address space already mapped.
    pub address_space: Option<usize>,
    /// The least room under the memory limit of the process's cgroup and its ancestors.
    pub cgroup: Option<usize>,
}

impl HostMemory {
    /// The limits of this process now, read from `/proc` and `/sys/fs/cgroup`.
    pub fn read() -> Self {
        let text = |path: &str| std::fs::read_to_string(path).ok();
        let limits = text("/proc/self/limits");
        let status = text("/proc/self/status");
        HostMemory {
            mem_available: text("/proc/meminfo").as_deref().and_then(mem_available),
            address_space: limits.as_deref().zip(status.as_deref()).and_then(|(l, s)| address_space_room(l, s)),
            cgroup: text("/proc/self/cgroup").and_then(|c| cgroup_room(&c, Path::new("/sys/fs/cgroup"))),
        }
    }

    /// The bytes this process can still allocate: the least of the limits known, `None`
    /// where none is.
    pub fn available(&self) -> Option<usize> {
        [self.mem_available, self.address_space, self.cgroup].into_iter().flatten().min()
    }
}

/// The bytes this process can still allocate now ([`HostMemory::read`], then
/// [`HostMemory::available`]); `None` where the system reports no limit (not Linux).
pub fn available_host_memory() -> Option<usize> {
    HostMemory::read().available()
}

/// This process's resident set now (`VmRSS` of `/proc/self/status`) and its peak since it
/// started or since [`reset_peak_resident_set`] (`VmHWM`), in bytes; `None` where they cannot
/// be read. What a measurement of an operation's host memory compares.
pub fn resident_set() -> Option<(usize, usize)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    Some((kb_field(&status, "VmRSS")?, kb_field(&status, "VmHWM")?))
}

/// Sets this process's peak resident set to its current one (Linux: `5` written to
/// `/proc/self/clear_refs`), so that [`resident_set`]'s peak measures what follows; false
/// where that cannot be done.
pub fn reset_peak_resident_set() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// A `key: value kB` line of `/proc/meminfo` or `/proc/self/status`, in bytes.
fn kb_field(text: &str, key: &str) -> Option<usize> {
    let line = text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?;
    let kb: usize = line.split_whitespace().next()?.parse().ok()?;
    Some(kb.saturating_mul(1024))
}

/// `MemAvailable` of the text of `/proc/meminfo`, in bytes.
pub fn mem_available(meminfo: &str) -> Option<usize> {
    kb_field(meminfo, "MemAvailable")
}

/// The soft address-space limit of the text of `/proc/self/limits` less `VmSize` of the
/// text of `/proc/self/status`; `None` when the limit is `unlimited`.
pub fn address_space_room(limits: &str, status: &str) -> Option<usize> {
    let line = limits.lines().find_map(|l| l.strip_prefix("Max address space"))?;
    let soft: usize = line.split_whitespace().next()?.parse().ok()?;
    let mapped = kb_field(status, "VmSize").unwrap_or(0);
    Some(soft.saturating_sub(mapped))
}

/// A cgroup limit file's value in bytes; `None` for no limit (`max` on v2, or the v1
/// controller's "unlimited", a page-rounded `i64::MAX`).
fn cgroup_bytes(text: &str) -> Option<usize> {
    let value: u64 = text.trim().parse().ok()?;
    (value < 1 << 62).then(|| usize::try_from(value).unwrap_or(usize::MAX))
}

/// The room one cgroup's limit leaves: the text of its limit file (`memory.max`, or v1's
/// `memory.limit_in_bytes`) less that of its usage (`memory.current`, or
/// `memory.usage_in_bytes`); `None` when it has no limit.
pub fn cgroup_limit_room(limit: &str, usage: &str) -> Option<usize> {
    let limit = cgroup_bytes(limit)?;
    let usage: usize = usage.trim().parse().unwrap_or(0);
    Some(limit.saturating_sub(usage))
}

/// The least room under the memory limits of the process's cgroup (the text of
/// `/proc/self/cgroup`) and its ancestors, under the cgroup filesystem at `root`: the v2
/// hierarchy (the `0::` line, `root` itself) where its files say, else the v1 memory
/// controller's (the `memory` line, `root/memory`).
pub fn cgroup_room(proc_cgroup: &str, root: &Path) -> Option<usize> {
    let path_of = |controller: &dyn Fn(&str) -> bool| {
        proc_cgroup.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controller(controllers).then_some(path)
        })
    };
    let v2 = path_of(&|c| c.is_empty()).and_then(|p| least_room(root, p, "memory.max", "memory.current"));
    v2.or_else(|| {
        let v1 = path_of(&|c| c.split(',').any(|c| c == "memory"))?;
        least_room(&root.join("memory"), v1, "memory.limit_in_bytes", "memory.usage_in_bytes")
    })
}

/// The least room of the cgroup at `path` under `root` and of each ancestor up to `root`
/// that has a limit; `None` when none has.
fn least_room(root: &Path, path: &str, limit: &str, usage: &str) -> Option<usize> {
    let mut dir: PathBuf = root.join(path.trim_start_matches('/'));
    let mut least: Option<usize> = None;
    loop {
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
        if let (Some(l), Some(u)) = (read(limit), read(usage))
            && let Some(room) = cgroup_limit_room(&l, &u)
        {
            least = Some(least.map_or(room, |r| r.min(room)));
        }
        if dir == root || !dir.pop() || !dir.starts_with(root) {
            return least;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str = "MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   2000000 kB\n";

    #[test]
    fn mem_available_is_read_in_bytes() {
        assert_eq!(mem_available(MEMINFO), Some(2_000_000 * 1024));
        assert_eq!(mem_available("MemTotal: 5 kB\n"), None);
    }

    #[test]
    fn the_address_space_limit_leaves_the_limit_less_what_is_mapped() {
        let limited = "Limit                     Soft Limit           Hard Limit           Units\n\
                       Max address space         8192000000           unlimited            bytes\n";
        let status = "Name:\tx\nVmPeak:\t  3000 kB\nVmSize:\t  2000 kB\n";
        assert_eq!(address_space_room(limited, status), Some(8_192_000_000 - 2000 * 1024));
        let unlimited = "Max address space         unlimited            unlimited            bytes\n";
        assert_eq!(address_space_room(unlimited, status), None);
    }

    #[test]
    fn cgroup_limits_leave_the_limit_less_the_usage_and_max_is_none() {
        assert_eq!(cgroup_limit_room("1073741824\n", "73741824\n"), Some(1_000_000_000));
        assert_eq!(cgroup_limit_room("max\n", "73741824\n"), None);
        assert_eq!(cgroup_limit_room("9223372036854771712\n", "5\n"), None, "v1's unlimited");
        assert_eq!(cgroup_limit_room("100\n", "200\n"), Some(0), "over the limit leaves nothing");
    }

    /// The least of the three is what is available; an absent one does not count.
    #[test]
    fn the_least_limit_is_the_room() {
        let m = HostMemory { mem_available: Some(10), address_space: Some(7), cgroup: Some(9) };
        assert_eq!(m.available(), Some(7));
        let m = HostMemory { mem_available: Some(10), address_space: None, cgroup: Some(9) };
        assert_eq!(m.available(), Some(9));
        assert_eq!(HostMemory::default().available(), None);
    }

    /// A v2 hierarchy on disk: the process's cgroup has no limit, its parent has one, and
    /// the grandparent a looser one; the parent's room is the answer.
    #[test]
    fn the_cgroup_room_is_the_least_over_the_process_cgroup_and_its_ancestors() {
        let root = std::env::temp_dir().join(format!("einsum-core-cgroup-{}", std::process::id()));
        let leaf = root.join("box/job");
        std::fs::create_dir_all(&leaf).unwrap();
        let write = |dir: &Path, max: &str, current: &str| {
            std::fs::write(dir.join("memory.max"), max).unwrap();
            std::fs::write(dir.join("memory.current"), current).unwrap();
        };
        write(&leaf, "max\n", "100\n");
        write(&root.join("box"), "5000\n", "1000\n");
        write(&root, "100000\n", "1000\n");
        let proc_cgroup = "4:memory:/elsewhere\n0::/box/job\n";
        assert_eq!(cgroup_room(proc_cgroup, &root), Some(4000));
        // No v2 line: the v1 memory controller's files, under root/memory.
        let v1 = root.join("memory/job");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(v1.join("memory.limit_in_bytes"), "3000\n").unwrap();
        std::fs::write(v1.join("memory.usage_in_bytes"), "500\n").unwrap();
        assert_eq!(cgroup_room("4:cpu,memory:/job\n", &root), Some(2500));
        assert_eq!(cgroup_room("4:cpu:/job\n", &root), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
