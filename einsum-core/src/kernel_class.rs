//! [`KernelClass`]: which roofline an operator's kernels run at.

/// What a kernel mostly does, which decides how close it gets to the roofline.
///
/// Every operator names its own class (`AbstractOperator::kernel_class` in
/// `einsum-joinagg`), so the time model (`einsum_sim::Roofline`, which re-exports this
/// type) prices kernels without knowing any operator's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelClass {
    /// Tensor contractions (`einsum`, `matmul`): tensor-core GEMMs.
    Matmul,
    /// Fused attention (FlashAttention-style: scores never leave on-chip memory).
    Attention,
    /// Elementwise maps, normalizations, softmax, RoPE, reductions: CUDA-core arithmetic,
    /// almost always memory-bound.
    Elementwise,
    /// Copies and ⊕-aggregations of blocks (slices, stitches, local sums): pure HBM traffic.
    Copy,
}

impl KernelClass {
    /// A short name, for error messages: `matmul`, `attention`, `elementwise`, `copy`.
    pub fn name(self) -> &'static str {
        match self {
            KernelClass::Matmul => "matmul",
            KernelClass::Attention => "attention",
            KernelClass::Elementwise => "elementwise",
            KernelClass::Copy => "copy",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct() {
        let names = [KernelClass::Matmul, KernelClass::Attention, KernelClass::Elementwise, KernelClass::Copy]
            .map(KernelClass::name);
        assert_eq!(names, ["matmul", "attention", "elementwise", "copy"]);
    }
}
