//! One allocation pool per GPU: every buffer (and every kernel's scratch space) gets an
//! offset in its GPU's pool from its lifetime in schedule order, first fit.
//!
//! # Design
//! Offsets are planned once, when the executable is prepared, so the captured CUDA graph
//! sees fixed addresses. Tasks on different streams may run concurrently, so reusing the
//! bytes of a dead allocation is only safe after every task that touched it: the plan
//! records, for every allocation, the earlier allocations whose bytes it overlaps, and the
//! schedule turns them into dependencies of its writer (a stream-ordered allocator would
//! do the same with events). The pool can be larger than the task graph's predicted peak
//! ([`einsum_core::taskgraph::TaskGraph::stats`]) by fragmentation and scratch space; the
//! prepared executable reports both.

/// Bytes every allocation is aligned to (cuBLAS and vector loads like 256).
pub const ALIGN: usize = 256;

/// One allocation: its GPU, size, and the first and last task (schedule positions) that
/// use it, inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alloc {
    /// The GPU whose pool holds it.
    pub gpu: usize,
    /// Bytes.
    pub bytes: usize,
    /// Position of the task that writes it first.
    pub first: usize,
    /// Position of the last task that reads it (at least `first`).
    pub last: usize,
}

/// Where every allocation lives and how large each pool is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolPlan {
    /// Byte offset of every allocation in its GPU's pool.
    pub offsets: Vec<usize>,
    /// Bytes of every GPU's pool.
    pub sizes: Vec<usize>,
    /// For every allocation, the earlier allocations whose bytes it reuses (their users must
    /// finish before it is written).
    pub reuses: Vec<Vec<usize>>,
}

fn align(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// Plans the pools of `gpus` GPUs for `allocs` (any order; placement follows `first`).
pub fn plan(allocs: &[Alloc], gpus: usize) -> PoolPlan {
    let mut order: Vec<usize> = (0..allocs.len()).collect();
    order.sort_by_key(|&i| (allocs[i].first, i));
    let mut offsets = vec![0; allocs.len()];
    let mut sizes = vec![0; gpus];
    let mut reuses = vec![Vec::new(); allocs.len()];
    // Per GPU, the allocations placed so far (index), for liveness and overlap checks.
    let mut placed: Vec<Vec<usize>> = vec![Vec::new(); gpus];
    for &i in &order {
        let a = allocs[i];
        let size = align(a.bytes.max(1));
        let live: Vec<(usize, usize)> = {
            let mut v: Vec<(usize, usize)> = placed[a.gpu]
                .iter()
                .filter(|&&j| allocs[j].last >= a.first)
                .map(|&j| (offsets[j], align(allocs[j].bytes.max(1))))
                .collect();
            v.sort_unstable();
            v
        };
        let mut at = 0;
        for (off, len) in live {
            if off >= at + size {
                break;
            }
            at = at.max(off + len);
        }
        offsets[i] = at;
        sizes[a.gpu] = sizes[a.gpu].max(at + size);
        reuses[i] = placed[a.gpu]
            .iter()
            .copied()
            .filter(|&j| {
                let (o, l) = (offsets[j], align(allocs[j].bytes.max(1)));
                allocs[j].last < a.first && o < at + size && at < o + l
            })
            .collect();
        placed[a.gpu].push(i);
    }
    PoolPlan { offsets, sizes, reuses }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlap(p: &PoolPlan, allocs: &[Alloc], i: usize, j: usize) -> bool {
        let (a, b) = (&allocs[i], &allocs[j]);
        a.gpu == b.gpu
            && p.offsets[i] < p.offsets[j] + align(b.bytes.max(1))
            && p.offsets[j] < p.offsets[i] + align(a.bytes.max(1))
    }

    #[test]
    fn dead_bytes_are_reused_and_recorded() {
        let allocs = [
            Alloc { gpu: 0, bytes: 1000, first: 0, last: 1 },
            Alloc { gpu: 0, bytes: 500, first: 1, last: 2 },
            Alloc { gpu: 0, bytes: 1000, first: 2, last: 3 },
            Alloc { gpu: 1, bytes: 10, first: 0, last: 3 },
        ];
        let p = plan(&allocs, 2);
        assert_eq!(p.offsets[0], 0);
        assert_eq!(p.offsets[1], 1024);
        assert_eq!(p.offsets[2], 0, "allocation 2 reuses allocation 0's bytes");
        assert_eq!(p.reuses[2], vec![0]);
        assert_eq!(p.sizes, vec![1536, 256]);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]
        /// Allocations alive at the same time never overlap, every allocation fits in its
        /// pool, and every overlap with an earlier allocation is recorded as a reuse.
        #[test]
        fn live_allocations_never_overlap(spec in proptest::collection::vec((0usize..2, 1usize..3000, 0usize..20, 0usize..5), 1..40)) {
            let allocs: Vec<Alloc> = spec.iter().map(|&(gpu, bytes, first, len)| Alloc { gpu, bytes, first, last: first + len }).collect();
            let p = plan(&allocs, 2);
            for i in 0..allocs.len() {
                proptest::prop_assert!(p.offsets[i] + allocs[i].bytes <= p.sizes[allocs[i].gpu]);
                proptest::prop_assert_eq!(p.offsets[i] % ALIGN, 0);
                for j in 0..allocs.len() {
                    if i == j || !overlap(&p, &allocs, i, j) { continue; }
                    let (a, b) = (&allocs[i], &allocs[j]);
                    let disjoint_in_time = a.last < b.first || b.last < a.first;
                    proptest::prop_assert!(disjoint_in_time, "{i} and {j} overlap while both live");
                    if b.last < a.first {
                        proptest::prop_assert!(p.reuses[i].contains(&j));
                    }
                }
            }
        }
    }
}
