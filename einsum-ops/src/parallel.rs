//! Splitting one kernel's work over the threads its backend lends it
//! ([`einsum_core::intra_op::helpers`]).
//!
//! # Design
//! Scoped OS threads, spawned per call: a kernel worth splitting runs for milliseconds and a
//! spawn costs tens of microseconds, so no pool is needed, and nothing outlives the call.
//! The calling thread takes the last part itself. With no helpers (the reference interpreter,
//! tests, a busy backend) the work runs inline, in one part: results never depend on the
//! split, because every part computes disjoint outputs with the same operations.

use std::ops::Range;

use einsum_core::intra_op;

/// The number of parts to split `n` items into: one per available thread (the caller and
/// its helpers), each part at least `min_part` items.
pub(crate) fn parts(n: usize, min_part: usize) -> usize {
    (1 + intra_op::helpers()).min(n / min_part.max(1)).max(1)
}

/// Runs `f` once for each of `parts` contiguous ranges that together cover `0..n`, on
/// `parts` threads (the calling one included). `parts` is at least 1.
pub(crate) fn for_ranges(n: usize, parts: usize, f: impl Fn(Range<usize>) + Sync) {
    let parts = parts.clamp(1, n.max(1));
    if parts == 1 {
        f(0..n);
        return;
    }
    let range = |p: usize| p * n / parts..(p + 1) * n / parts;
    std::thread::scope(|scope| {
        let f = &f;
        for p in 0..parts - 1 {
            scope.spawn(move || f(range(p)));
        }
        f(range(parts - 1));
    });
}

/// Runs `f(i, chunk)` for every `chunk_len`-element chunk `i` of `data`, the chunks split
/// over [`parts`]`(chunks, 1)` threads.
pub(crate) fn for_chunks_mut<T: Send>(data: &mut [T], chunk_len: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let chunk_len = chunk_len.max(1);
    let chunks = data.len().div_ceil(chunk_len);
    let parts = parts(chunks, 1);
    if parts <= 1 {
        data.chunks_mut(chunk_len).enumerate().for_each(|(i, c)| f(i, c));
        return;
    }
    let per = chunks.div_ceil(parts);
    std::thread::scope(|scope| {
        let f = &f;
        let mut groups = data.chunks_mut(per * chunk_len).enumerate();
        let last = groups.next_back();
        for (g, group) in groups {
            scope.spawn(move || group.chunks_mut(chunk_len).enumerate().for_each(|(i, c)| f(g * per + i, c)));
        }
        if let Some((g, group)) = last {
            group.chunks_mut(chunk_len).enumerate().for_each(|(i, c)| f(g * per + i, c));
        }
    });
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn ranges_cover_every_item_once_whatever_the_split() {
        for (n, parts) in [(0, 3), (1, 4), (10, 1), (10, 3), (7, 7), (5, 9)] {
            let seen = Mutex::new(vec![0u32; n]);
            for_ranges(n, parts, |r| {
                let mut s = seen.lock().unwrap();
                r.for_each(|i| s[i] += 1);
            });
            assert_eq!(seen.into_inner().unwrap(), vec![1; n], "n {n}, parts {parts}");
        }
    }

    #[test]
    fn chunks_get_their_own_index_on_any_number_of_threads() {
        for helpers in [0, 1, 3] {
            let mut data = vec![0usize; 7 * 3];
            intra_op::with_helpers(helpers, || for_chunks_mut(&mut data, 3, |i, c| c.fill(i)));
            let want: Vec<usize> = (0..7).flat_map(|i| [i; 3]).collect();
            assert_eq!(data, want, "{helpers} helpers");
        }
        assert_eq!(intra_op::with_helpers(3, || parts(10, 4)), 2);
        assert_eq!(parts(10, 1), 1);
    }
}
