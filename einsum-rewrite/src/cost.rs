//! What extraction minimizes: a per-contraction cost in flops, elements moved and launches.

use std::collections::BTreeSet;

use crate::Network;

/// The cost of one pairwise contraction, a weighted sum: `flop` per floating-point operation
/// ([`Network::flops`]), `element` per element of the two parts read and of the result
/// written, `launch` per contraction (one kernel each). A sum over a form's contractions, as
/// extraction from an e-graph needs (a roofline's larger-of is not additive); with the
/// weights of a machine ([`Cost::roofline`]) it is an estimate in seconds that a form with
/// large intermediates, or more kernels, pays for even where its flops are equal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    /// Per floating-point operation.
    pub flop: f64,
    /// Per element read or written.
    pub element: f64,
    /// Per contraction.
    pub launch: f64,
}

impl Cost {
    /// Flops alone.
    pub const FLOPS: Cost = Cost { flop: 1.0, element: 0.0, launch: 0.0 };

    /// Seconds on a device of `flops_per_second` and `bytes_per_second` of memory bandwidth,
    /// with elements of `element_bytes` and `launch_seconds` per kernel.
    pub fn roofline(flops_per_second: f64, bytes_per_second: f64, element_bytes: f64, launch_seconds: f64) -> Cost {
        Cost { flop: 1.0 / flops_per_second, element: element_bytes / bytes_per_second, launch: launch_seconds }
    }

    /// The cost of contracting parts with indices `a` and `b` of `network`.
    pub fn contraction(&self, network: &Network, a: &BTreeSet<usize>, b: &BTreeSet<usize>) -> f64 {
        let elements = |s: &BTreeSet<usize>| s.iter().map(|&i| network.extent(i) as f64).product::<f64>();
        let moved = elements(a) + elements(b) + elements(&network.joined(a, b));
        self.flop * network.flops(a, b) + self.element * moved + self.launch
    }
}

impl Default for Cost {
    /// [`Cost::FLOPS`].
    fn default() -> Self {
        Cost::FLOPS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(ij)(jk)`: 48 flops, 6 + 12 + 8 elements, one launch.
    #[test]
    fn a_contraction_costs_its_flops_elements_and_launch() {
        let n = Network::new(
            &[&["i", "j"], &["j", "k"], &["k", "l"]],
            &[("i", 2), ("j", 3), ("k", 4), ("l", 5)],
            &["i", "l"],
        )
        .unwrap();
        let set = |v: &[usize]| v.iter().copied().collect::<BTreeSet<_>>();
        let (a, b) = (set(&[0, 1]), set(&[1, 2]));
        assert_eq!(Cost::FLOPS.contraction(&n, &a, &b), 48.0);
        assert_eq!(Cost { flop: 0.0, element: 1.0, launch: 0.0 }.contraction(&n, &a, &b), 26.0);
        assert_eq!(Cost { flop: 1.0, element: 1.0, launch: 100.0 }.contraction(&n, &a, &b), 174.0);
        let r = Cost::roofline(1e12, 1e9, 2.0, 1e-6);
        assert!((r.contraction(&n, &a, &b) - (48e-12 + 52e-9 + 1e-6)).abs() < 1e-15);
    }
}
