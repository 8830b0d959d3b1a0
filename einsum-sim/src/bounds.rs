//! Bandwidth lower bounds for collectives, to measure synthesized exchange
//! programs against: `S` bytes held (or wanted) by each of `n` sites, `B` bytes/s of
//! per-site bandwidth in each direction. Every bound is 0 for `n <= 1` (nothing moves).

fn fraction(n: usize) -> f64 {
    if n <= 1 { 0.0 } else { (n - 1) as f64 / n as f64 }
}

/// All-reduce: every site ends with the sum of all `n` sites' `S`-byte arrays:
/// `2(n-1)/n · S/B` (a reduce-scatter then an all-gather).
pub fn all_reduce_bound(bytes: f64, n: usize, bandwidth: f64) -> f64 {
    2.0 * fraction(n) * bytes / bandwidth
}

/// Reduce-scatter: every site ends with the sum of one `S/n` slice: `(n-1)/n · S/B`.
pub fn reduce_scatter_bound(bytes: f64, n: usize, bandwidth: f64) -> f64 {
    fraction(n) * bytes / bandwidth
}

/// All-gather: every site ends with all `n` slices of an `S`-byte array: `(n-1)/n · S/B`.
pub fn all_gather_bound(bytes: f64, n: usize, bandwidth: f64) -> f64 {
    fraction(n) * bytes / bandwidth
}

/// All-to-all: every site sends a distinct `S/n` slice of its `S` bytes to each other site:
/// `(n-1)/n · S/B`.
pub fn all_to_all_bound(bytes: f64, n: usize, bandwidth: f64) -> f64 {
    fraction(n) * bytes / bandwidth
}

/// Broadcast: one site's `S` bytes reach every other site: `S/B` (each receiver must take
/// in all of it).
pub fn broadcast_bound(bytes: f64, n: usize, bandwidth: f64) -> f64 {
    if n <= 1 { 0.0 } else { bytes / bandwidth }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_match_the_formulas() {
        let (s, b) = (8e9, 100e9);
        assert_eq!(all_reduce_bound(s, 8, b), 2.0 * 7.0 / 8.0 * 0.08);
        assert_eq!(reduce_scatter_bound(s, 8, b), 7.0 / 8.0 * 0.08);
        assert_eq!(all_gather_bound(s, 4, b), 0.75 * 0.08);
        assert_eq!(all_to_all_bound(s, 2, b), 0.5 * 0.08);
        assert_eq!(broadcast_bound(s, 8, b), 0.08);
        for n in [0, 1] {
            assert_eq!(all_reduce_bound(s, n, b), 0.0);
            assert_eq!(broadcast_bound(s, n, b), 0.0);
        }
    }
}
