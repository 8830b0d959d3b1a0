//! The plausible range of every physical value of a topology file, in one place.
//!
//! A file value outside its range is refused where it is read, naming the field
//! (`site.hbm_gbps: 1e-300 GB/s is out of range ...`). The ranges are wide — about three
//! orders of magnitude on either side of any machine built or announced — so they refuse
//! only typos and nonsense: a value in the wrong unit (bytes/s where GB/s are meant), a
//! missing exponent sign, or numbers that would overflow once converted to base units
//! (`1e308` GB/s) or make every prediction absurd (an all-`1e-300` machine predicts a
//! plan in 1.9e295 s).
//!
//! | quantity | fields | unit | range |
//! |---|---|---|---|
//! | bandwidth | `hbm_gbps`, `egress_gbps`, `ingress_gbps`, `nic_gbps`, `links[i].gbps`, `fallback.gbps`, `fabric.gbps` | GB/s | 1e-3 ..= 1e7 |
//! | memory capacity | `hbm_gb` | GB | 1e-3 ..= 1e5 |
//! | compute rate | `tflops.f16`, `tflops.bf16`, `tflops.f32` | TFLOP/s | 1e-3 ..= 1e5 |
//! | latency | `latency.kernel_launch_us`, `latency.link_us`, `latency.bus_us`, `latency.network_us` | µs | 0 ..= 1e6 |
//! | streaming multiprocessors | `sms` | SMs | 1 ..= 1e5 |
//!
//! A latency may be zero (the default: none).
//!
//! For scale: an H200's HBM moves 4.8e3 GB/s and holds 141 GB, a B200 computes 2.25e3
//! TFLOP/s in bf16, a switched fabric of 1024 nodes at 400 GB/s carries 4e5 GB/s, and
//! 1 Mbit/s Ethernet moves 1.25e-4 GB/s.
//!
//! Topologies built in code ([`Topology::new`](crate::Topology::new)) are held only to
//! positive and finite values, so that tests may model toy machines.

use std::fmt;

/// The plausible range of one kind of physical value, in the file's unit (both ends
/// included).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Plausible {
    /// What the value is, for messages ("a bandwidth").
    pub what: &'static str,
    /// The file's unit ("GB/s").
    pub unit: &'static str,
    /// The smallest plausible value.
    pub min: f64,
    /// The largest plausible value.
    pub max: f64,
}

/// Bandwidths in GB/s: HBM, endpoint caps, NICs, links, shared fallbacks and fabrics.
pub const BANDWIDTH: Plausible = Plausible { what: "a bandwidth", unit: "GB/s", min: 1e-3, max: 1e7 };

/// Memory capacities in GB (`hbm_gb`).
pub const CAPACITY: Plausible = Plausible { what: "a memory capacity", unit: "GB", min: 1e-3, max: 1e5 };

/// Dense peak compute rates in TFLOP/s (`tflops`).
pub const COMPUTE: Plausible = Plausible { what: "a compute rate", unit: "TFLOP/s", min: 1e-3, max: 1e5 };

/// Latencies in µs (`latency`): zero, the default, means none; a second is beyond any
/// launch, link or network delay.
pub const LATENCY: Plausible = Plausible { what: "a latency", unit: "µs", min: 0.0, max: 1e6 };

/// Counts of streaming multiprocessors (`sms`): 132 on an H100; a larger count makes every
/// small kernel look wave-quantized to nothing (see `efficiency.rs`), so a typo is refused.
pub const SM_COUNT: Plausible = Plausible { what: "a count of SMs", unit: "SMs", min: 1.0, max: 1e5 };

/// Every range, for documentation and tests.
pub const ALL: [Plausible; 5] = [BANDWIDTH, CAPACITY, COMPUTE, LATENCY, SM_COUNT];

impl Plausible {
    /// `x` when it lies in the range; else a message saying the value, the unit and the
    /// range (NaN and infinities are out of every range).
    pub fn check(&self, x: f64) -> Result<f64, String> {
        if x >= self.min && x <= self.max {
            Ok(x)
        } else {
            Err(format!("{} {} is out of range: {} must lie in {self}", number(x), self.unit, self.what))
        }
    }
}

impl fmt::Display for Plausible {
    /// `[0.001, 1e7] GB/s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {}] {}", number(self.min), number(self.max), self.unit)
    }
}

/// `x` as people write it: plainly from 1e-3 to 1e6 (`-1`, `0.5`, `3350`), in scientific
/// notation beyond (`1e308`, `1e-300`), so that no message spells out 300 digits.
fn number(x: f64) -> String {
    if x == 0.0 || !x.is_finite() || (1e-3..1e6).contains(&x.abs()) { x.to_string() } else { format!("{x:e}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_hold_real_machines_and_refuse_nonsense() {
        assert_eq!(BANDWIDTH.check(3350.0), Ok(3350.0));
        assert_eq!(CAPACITY.check(141.0), Ok(141.0));
        assert_eq!(COMPUTE.check(2250.0), Ok(2250.0));
        for r in ALL {
            assert_eq!(r.check(r.min), Ok(r.min));
            assert_eq!(r.check(r.max), Ok(r.max));
            let below = if r.min > 0.0 { vec![0.0, 1e-300, r.min / 2.0] } else { vec![] };
            for bad in below.into_iter().chain([-1.0, 1e308, f64::NAN, f64::INFINITY, r.max * 2.0]) {
                let e = r.check(bad).unwrap_err();
                assert!(e.contains("is out of range") && e.contains(r.unit), "{e}");
            }
        }
        assert_eq!(
            BANDWIDTH.check(1e308).unwrap_err(),
            "1e308 GB/s is out of range: a bandwidth must lie in [0.001, 1e7] GB/s"
        );
        assert_eq!(
            COMPUTE.check(-1.0).unwrap_err(),
            "-1 TFLOP/s is out of range: a compute rate must lie in [0.001, 100000] TFLOP/s"
        );
    }
}
