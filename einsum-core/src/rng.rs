//! The one seeded random generator of the project: reproducible test data, the `random`
//! strategy's draws, and the exchange-program search.

use std::convert::Infallible;

use rand::seq::IndexedRandom;
use rand::{RngExt, SeedableRng, TryRng};
use rand_pcg::Pcg64Mcg;

/// A seeded generator whose stream is the same on every platform and build.
///
/// The bits come from PCG64 (`rand_pcg::Pcg64Mcg`, value-stable by that crate's policy) and
/// the draws from `rand`'s unbiased samplers; this type only adds the few short names the
/// project uses everywhere (`below`, `pick`, `unit`, `uniform`). It implements
/// [`rand::Rng`], so every `rand` distribution, `shuffle` and `choose` also works on it.
#[derive(Clone, Debug)]
pub struct SeededRng(Pcg64Mcg);

impl SeededRng {
    /// A generator started from `seed`; equal seeds give equal streams.
    pub fn new(seed: u64) -> Self {
        Self(Pcg64Mcg::seed_from_u64(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        rand::Rng::next_u64(&mut self.0)
    }

    /// A uniform float in `[lo, hi)`; `lo` when the range is empty.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        if lo < hi { self.0.random_range(lo..hi) } else { lo }
    }

    /// A uniform integer in `[0, n)`; 0 when `n` is 0.
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { self.0.random_range(0..n) }
    }

    /// A uniform `f64` in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        self.0.random()
    }

    /// A uniformly chosen element, `None` when `items` is empty.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        items.choose(&mut self.0)
    }
}

impl TryRng for SeededRng {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        self.0.try_next_u32()
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        self.0.try_next_u64()
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        self.0.try_fill_bytes(dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_in_range() {
        let (mut a, mut b) = (SeededRng::new(7), SeededRng::new(7));
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
            let x = a.unit();
            assert!((0.0..1.0).contains(&x));
            assert_eq!(x, b.unit());
            assert!(a.below(5) < 5);
            b.below(5);
            let f = a.uniform(-1.0, 1.0);
            assert!((-1.0..1.0).contains(&f));
            b.uniform(-1.0, 1.0);
        }
        assert_eq!(a.below(0), 0);
        assert_eq!(a.uniform(2.0, 2.0), 2.0);
        assert_eq!(a.pick::<u8>(&[]), None);
        assert_eq!(a.pick(&[3u8]), Some(&3));
    }

    #[test]
    fn different_seeds_differ() {
        let (mut a, mut b) = (SeededRng::new(1), SeededRng::new(2));
        assert_ne!((a.next_u64(), a.next_u64()), (b.next_u64(), b.next_u64()));
    }

    #[test]
    fn draws_cover_the_range() {
        let mut rng = SeededRng::new(3);
        let mut seen = [false; 6];
        for _ in 0..200 {
            seen[rng.below(6)] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}
