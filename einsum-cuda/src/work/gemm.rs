//! A cuBLAS strided-batched GEMM (the row-major description is
//! [`crate::kernels::gemm_plan::Gemm`]).

use cudarc::cublas;
use einsum_core::DType;

use super::DeviceWork;
use crate::emulate::EmulatedMemory;
use crate::executor::IssueCtx;
use crate::kernels::gemm_plan::Gemm;
use crate::lower::Ptr;

/// `C = A · B`, batched, through cuBLAS.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchedGemm {
    /// A.
    pub a: Ptr,
    /// B.
    pub b: Ptr,
    /// C.
    pub c: Ptr,
    /// Element type of A, B and C (f32 accumulation).
    pub dtype: DType,
    /// The GEMM.
    pub gemm: Gemm,
}

fn cuda_dtype(d: DType) -> Result<cublas::sys::cudaDataType, String> {
    Ok(match d {
        DType::F32 => cublas::sys::cudaDataType::CUDA_R_32F,
        DType::F16 => cublas::sys::cudaDataType::CUDA_R_16F,
        DType::BF16 => cublas::sys::cudaDataType::CUDA_R_16BF,
        DType::I32 => return Err("a GEMM of i32 operands (indices are not multiplied)".into()),
    })
}

impl DeviceWork for BatchedGemm {
    /// The row-major batched GEMM through cuBLAS's column-major
    /// `cublasGemmStridedBatchedEx`: computes `Cᵀ = Bᵀ · Aᵀ` (f32 accumulation).
    fn issue(&self, ctx: &IssueCtx<'_>) -> Result<(), String> {
        let g = &self.gemm;
        if g.m == 0 || g.n == 0 || g.batch == 0 {
            return Ok(());
        }
        let (a, b, c) = (ctx.addr(self.a), ctx.addr(self.b), ctx.addr(self.c));
        use cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
        let (op_b, ldb_cm) = if g.trans_b { (CUBLAS_OP_T, g.k) } else { (CUBLAS_OP_N, g.n) };
        let (op_a, lda_cm) = if g.trans_a { (CUBLAS_OP_T, g.m) } else { (CUBLAS_OP_N, g.k) };
        let (alpha, beta) = (1.0f32, 0.0f32);
        let ty = cuda_dtype(self.dtype)?;
        let int = |x: usize| i32::try_from(x).map_err(|_| format!("GEMM size {x} exceeds cuBLAS's 32-bit sizes"));
        ctx.gpu().ctx.bind_to_thread().map_err(|e| e.to_string())?;
        // SAFETY: A, B and C address pool memory of the sizes the plan computed; alpha and
        // beta are host scalars read when the call is enqueued (and captured by value).
        unsafe {
            cublas::result::gemm_strided_batched_ex(
                *ctx.blas().handle(),
                op_b,
                op_a,
                int(g.n)?,
                int(g.m)?,
                int(g.k)?,
                &alpha as *const f32 as *const _,
                b as *const _,
                ty,
                int(ldb_cm.max(1))?,
                g.stride_b as i64,
                a as *const _,
                ty,
                int(lda_cm.max(1))?,
                g.stride_a as i64,
                &beta as *const f32 as *const _,
                c as *mut _,
                ty,
                int(g.n)?,
                g.stride_c as i64,
                int(g.batch)?,
                cublas::sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublas::sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| format!("cuBLAS GEMM {}x{}x{} (batch {}): {e:?}", g.m, g.n, g.k, g.batch))
    }

    /// One f32 accumulation per output element, in `k` order.
    fn emulate(&self, m: &mut EmulatedMemory) {
        let (g, dtype) = (&self.gemm, self.dtype);
        for bi in 0..g.batch {
            for i in 0..g.m {
                for j in 0..g.n {
                    let mut acc = 0.0f32;
                    for l in 0..g.k {
                        let ai = bi * g.stride_a + if g.trans_a { l * g.m + i } else { i * g.k + l };
                        let bj = bi * g.stride_b + if g.trans_b { j * g.k + l } else { l * g.n + j };
                        acc += m.ld(self.a, ai, dtype) * m.ld(self.b, bj, dtype);
                    }
                    m.st(self.c, bi * g.stride_c + i * g.n + j, dtype, acc);
                }
            }
        }
    }
}
