//! A roofline model of kernel time, for predicting whole plans.
//!
//! A kernel doing `flops` floating-point operations, reading and writing `bytes` of HBM and
//! writing `output_elements` on a site takes
//!
//! ```text
//! max(flops / (peak FLOP/s at its precision × compute efficiency × wave efficiency),
//!     bytes / (HBM bandwidth × memory efficiency))
//! ```
//!
//! where the peak rate is the site's dense rate ([`crate::ComputeRates`]: 312, 989 and 125
//! TFLOP/s at f16 on the A100, H100 and V100 presets) and the efficiencies depend on the
//! kind of kernel ([`KernelClass`]). The efficiencies ([`Roofline`]) are set from public
//! kernel benchmarks and first principles, never fitted to the paper's measured figures, so
//! that comparing predictions with those figures stays an honest test of the model. They are
//! plain public fields: override them to model other kernels.
//!
//! The wave efficiency (`efficiency.rs`) is how far a tiled kernel (GEMM, attention) with few
//! output tiles falls short of filling the site's SMs; it is 1 for large kernels and where
//! the site's SM count is not given. The launch of the kernel is not part of this time: it
//! is a latency of the machine ([`crate::Latency::kernel_launch`]), which the simulator
//! charges before the kernel starts and the `time` cost model adds to it. The model ignores
//! skinny shapes beyond their tile count, and caches.

use crate::efficiency::kernel_wave_efficiency;
use crate::error::SimError;
use crate::topology::{Precision, Site};

/// Re-exported from `einsum-core`, where every operator names its own class
/// (`AbstractOperator::kernel_class`): this crate knows no operator names.
pub use einsum_core::KernelClass;

/// The fractions of a site's peak FLOP/s and of its HBM bandwidth that a kernel reaches.
/// Both must lie in `(0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Efficiency {
    /// Fraction of the dense peak FLOP/s.
    pub compute: f64,
    /// Fraction of the HBM bandwidth.
    pub memory: f64,
}

/// Memory-bound kernels (copies, elementwise maps, the memory-bound phases of any kernel)
/// reach about 80-90% of the HBM bandwidth: STREAM-style copy benchmarks (e.g. BabelStream)
/// measure roughly 1.3-1.4 TB/s on an A100 whose HBM peak is 1.555 TB/s. We take 0.85.
pub const MEMORY_EFFICIENCY: f64 = 0.85;

/// Large fp16/bf16 GEMMs in cuBLAS reach about 70-80% of the dense tensor-core peak on the
/// A100 (NVIDIA's "Matrix Multiplication Background" performance guide and common cuBLAS
/// benchmarks of large square problems). We take 0.75.
pub const MATMUL_COMPUTE_EFFICIENCY: f64 = 0.75;

/// FlashAttention-2 (Dao, 2023) reports its forward pass at 50-73% of the A100's
/// theoretical peak FLOP/s, depending on head size and sequence length. We take 0.6.
pub const ATTENTION_COMPUTE_EFFICIENCY: f64 = 0.6;

/// Elementwise kernels run on CUDA cores, not tensor cores: the A100's non-tensor fp16 rate
/// is 78 TFLOP/s, a quarter of its 312 TFLOP/s dense tensor peak (NVIDIA A100 whitepaper).
/// We take 0.25 of the peak. (At f32 the presets' rate is already the CUDA-core rate, so this
/// is pessimistic there; these kernels are memory-bound at either precision.)
pub const ELEMENTWISE_COMPUTE_EFFICIENCY: f64 = 0.25;

/// One kernel, as the roofline times it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelWork {
    /// What kind of kernel it is.
    pub class: KernelClass,
    /// Floating-point operations.
    pub flops: f64,
    /// HBM bytes read and written.
    pub bytes: f64,
    /// Elements written (all outputs together): how many output tiles it runs as.
    pub output_elements: f64,
    /// The precision of its arithmetic (the peak rate it runs against).
    pub precision: Precision,
}

/// How close each class of kernel gets to the roofline. [`Roofline::default`] is the
/// documented parameter set (the constants of this module); every field may be overridden.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Roofline {
    /// Tensor contractions: [`MATMUL_COMPUTE_EFFICIENCY`], [`MEMORY_EFFICIENCY`].
    pub matmul: Efficiency,
    /// Fused attention: [`ATTENTION_COMPUTE_EFFICIENCY`], [`MEMORY_EFFICIENCY`].
    pub attention: Efficiency,
    /// Elementwise and normalization kernels: [`ELEMENTWISE_COMPUTE_EFFICIENCY`],
    /// [`MEMORY_EFFICIENCY`].
    pub elementwise: Efficiency,
    /// Copies and aggregations: compute 1 (a sum is one FLOP per element and never the
    /// bottleneck), [`MEMORY_EFFICIENCY`].
    pub copy: Efficiency,
}

impl Default for Roofline {
    fn default() -> Self {
        let with = |compute| Efficiency { compute, memory: MEMORY_EFFICIENCY };
        Roofline {
            matmul: with(MATMUL_COMPUTE_EFFICIENCY),
            attention: with(ATTENTION_COMPUTE_EFFICIENCY),
            elementwise: with(ELEMENTWISE_COMPUTE_EFFICIENCY),
            copy: with(1.0),
        }
    }
}

impl Roofline {
    /// The efficiencies of `class`.
    pub fn efficiency(&self, class: KernelClass) -> Efficiency {
        match class {
            KernelClass::Matmul => self.matmul,
            KernelClass::Attention => self.attention,
            KernelClass::Elementwise => self.elementwise,
            KernelClass::Copy => self.copy,
        }
    }

    /// Checks that every efficiency lies in `(0, 1]`; the error names the class and field.
    pub fn validate(&self) -> Result<(), SimError> {
        for class in [KernelClass::Matmul, KernelClass::Attention, KernelClass::Elementwise, KernelClass::Copy] {
            let e = self.efficiency(class);
            for (field, value) in [("compute", e.compute), ("memory", e.memory)] {
                if !(value > 0.0 && value <= 1.0) {
                    return Err(SimError::InvalidEfficiency { class: class.name(), field, value });
                }
            }
        }
        Ok(())
    }

    /// Seconds for `kernel` on `site`: the larger of its compute time (its FLOPs over the
    /// efficient share of the site's peak at its precision, scaled by its wave efficiency on
    /// the site's SMs) and its memory time (module docs). The launch is not included (see the
    /// module docs). This is the one kernel-time formula: the whole-plan prediction and the
    /// `time` cost model both call it.
    pub fn kernel_seconds(&self, site: &Site, kernel: &KernelWork) -> f64 {
        let e = self.efficiency(kernel.class);
        let waves = kernel_wave_efficiency(kernel.class, kernel.output_elements, site.sms);
        let compute = kernel.flops / (site.compute.rate(kernel.precision) * e.compute * waves);
        let memory = kernel.bytes / (site.hbm_bandwidth * e.memory);
        compute.max(memory)
    }

    /// The bytes that, moved at the full HBM bandwidth, take as long as a copy of `bytes`
    /// does at the [`Roofline::copy`] memory efficiency: `bytes / copy.memory`. The
    /// simulator's aggregations run at full bandwidth; scaling their bytes by this applies
    /// the efficiency.
    pub fn copy_bytes(&self, bytes: f64) -> f64 {
        bytes / self.copy.memory
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{ComputeRates, GB, TFLOP};

    fn work(class: KernelClass, flops: f64, bytes: f64, output_elements: f64, precision: Precision) -> KernelWork {
        KernelWork { class, flops, bytes, output_elements, precision }
    }

    #[test]
    fn kernels_are_bound_by_the_slower_of_compute_and_memory() {
        let site = Site::new(1000.0, 10.0, ComputeRates::tflops(100.0, 100.0, 10.0));
        let r = Roofline::default();
        // 1.5 TFLOP at 0.75 of 100 TFLOP/s: 20 ms; 1 GB at 0.85 of 1000 GB/s: 1.18 ms
        let t = r.kernel_seconds(&site, &work(KernelClass::Matmul, 1.5 * TFLOP, GB, 1e9, Precision::F16));
        assert_eq!(t, 1.5 * TFLOP / (100.0 * TFLOP * 0.75));
        // 1 GFLOP at 0.25 of 10 TFLOP/s (f32): 0.4 ms; 10 GB at 0.85 of 1000 GB/s: 11.8 ms
        let t = r.kernel_seconds(&site, &work(KernelClass::Elementwise, 1e9, 10.0 * GB, 1.0, Precision::F32));
        assert_eq!(t, 10.0 * GB / (1000.0 * GB * 0.85));
        assert_eq!(r.copy_bytes(0.85 * GB), GB);
    }

    /// A 1024 × 1024 × 4096 f16 GEMM on an A100 is compute-bound, and its 64 output tiles
    /// fill 64 of the 108 SMs: it takes 108/64 of its roofline time. The same GEMM with
    /// 16 times the rows fills 9.5 of 10 waves.
    #[test]
    fn a_small_gemm_is_slower_than_roofline_by_wave_quantization() {
        let a100 = crate::Topology::preset("dgx-a100").expect("preset").sites()[0];
        assert_eq!(a100.sms, Some(crate::efficiency::A100_SMS));
        let r = Roofline::default();
        let (m, n, k) = (1024.0, 1024.0, 4096.0);
        let gemm =
            |m: f64| work(KernelClass::Matmul, 2.0 * m * n * k, 2.0 * (m * k + k * n + m * n), m * n, Precision::F16);
        let roofline = |m: f64| 2.0 * m * n * k / (312.0 * TFLOP * 0.75);
        let small = r.kernel_seconds(&a100, &gemm(m));
        assert!((small / roofline(m) - 108.0 / 64.0).abs() < 1e-12, "{}", small / roofline(m));
        let large = r.kernel_seconds(&a100, &gemm(16.0 * m));
        assert!((large / roofline(16.0 * m) - 1080.0 / 1024.0).abs() < 1e-12);
        // Without an SM count the kernel reaches its roofline at any size.
        let plain = Site { sms: None, ..a100 };
        assert_eq!(r.kernel_seconds(&plain, &gemm(m)), roofline(m));
    }

    #[test]
    fn efficiencies_outside_zero_one_are_rejected() {
        assert_eq!(Roofline::default().validate(), Ok(()));
        let mut r = Roofline::default();
        r.attention.memory = 1.5;
        assert_eq!(r.validate(), Err(SimError::InvalidEfficiency { class: "attention", field: "memory", value: 1.5 }));
        r = Roofline::default();
        r.copy.compute = f64::NAN;
        assert!(matches!(r.validate(), Err(SimError::InvalidEfficiency { class: "copy", field: "compute", .. })));
        r.copy.compute = 0.0;
        let msg = r.validate().unwrap_err().to_string();
        assert!(msg.contains("copy") && msg.contains("compute") && msg.contains('0'), "{msg}");
    }
}
