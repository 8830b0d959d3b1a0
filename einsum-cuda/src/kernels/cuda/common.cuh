// Shared by every kernel source (prepended before compilation, after the generated codes of
// kernels/codes.rs; no system headers, so that NVRTC needs none). Storage dtypes are
// DTYPE_F32, DTYPE_F16 and DTYPE_BF16; arithmetic is in f32.
typedef long long i64;

#define MAX_RANK 8
#define NEG_INF __int_as_float(0xff800000)

// A strided iteration space: `shape` is iterated row-major; s[j][d] is the stride of
// dimension d in the j-th tensor addressed (0 broadcasts).
struct Dims {
    int rank;
    int pad;
    i64 shape[MAX_RANK];
    i64 s0[MAX_RANK];
    i64 s1[MAX_RANK];
    i64 s2[MAX_RANK];
};

__device__ __forceinline__ float ld(const void* p, i64 i, int dt) {
    if (dt == DTYPE_F32) return ((const float*)p)[i];
    unsigned short h = ((const unsigned short*)p)[i];
    if (dt == DTYPE_F16) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
        return f;
    }
    return __uint_as_float(((unsigned int)h) << 16);  // DTYPE_BF16
}

__device__ __forceinline__ void st(void* p, i64 i, int dt, float v) {
    if (dt == DTYPE_F32) {
        ((float*)p)[i] = v;
        return;
    }
    unsigned short h;
    if (dt == DTYPE_F16) {
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    } else {  // DTYPE_BF16
        unsigned int u = __float_as_uint(v);
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            h = 0x7fc0;  // NaN
        } else {
            u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
            h = (unsigned short)(u >> 16);
        }
    }
    ((unsigned short*)p)[i] = h;
}

// Offsets of the linear index `i` of `d.shape` in the first, second and third tensor.
__device__ __forceinline__ void offsets(const Dims& d, i64 i, i64* o0, i64* o1, i64* o2) {
    i64 a = 0, b = 0, c = 0;
    for (int k = d.rank - 1; k >= 0; --k) {
        i64 n = d.shape[k];
        i64 x = i % n;
        i /= n;
        a += x * d.s0[k];
        b += x * d.s1[k];
        c += x * d.s2[k];
    }
    *o0 = a;
    *o1 = b;
    *o2 = c;
}

__device__ __forceinline__ i64 volume(const Dims& d) {
    i64 v = 1;
    for (int k = 0; k < d.rank; ++k) v *= d.shape[k];
    return v;
}

#define GRID_STRIDE(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)
