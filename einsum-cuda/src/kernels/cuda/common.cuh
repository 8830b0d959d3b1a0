// Shared by every kernel source (prepended before compilation, after the generated codes of
// kernels/codes.rs; no system headers, so that NVRTC needs none). Storage dtypes are
// DTYPE_F32, DTYPE_F16 and DTYPE_BF16, and DTYPE_I32 for indices (loaded, stored and
// copied, never computed with); arithmetic is in f32.
typedef long long i64;
typedef unsigned int u32;

#define MAX_RANK 8
#define NEG_INF __int_as_float(0xff800000)
#define NAN_F32 __int_as_float(0x7fc00000)

// NumPy's maximum: a where a >= b or a is NaN, else b, so that a NaN on either side is the
// result (fmaxf returns the other operand of a NaN and would hide it). The running maxima of
// the reductions, softmax and attention take it, as the CPU kernels and the emulator do.
__device__ __forceinline__ float nan_max(float a, float b) { return (a >= b || a != a) ? a : b; }

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

// One 16-bit storage value (DTYPE_F16 or DTYPE_BF16) as f32.
__device__ __forceinline__ float half_to_f32(unsigned short h, int dt) {
    if (dt == DTYPE_F16) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
        return f;
    }
    return __uint_as_float(((unsigned int)h) << 16);  // DTYPE_BF16
}

// f32 rounded to nearest even in a 16-bit storage dtype (DTYPE_F16 or DTYPE_BF16).
__device__ __forceinline__ unsigned short f32_to_half(float v, int dt) {
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
    return h;
}

__device__ __forceinline__ float ld(const void* p, i64 i, int dt) {
    if (dt == DTYPE_F32) return ((const float*)p)[i];
    if (dt == DTYPE_I32) return (float)((const int*)p)[i];
    return half_to_f32(((const unsigned short*)p)[i], dt);
}

__device__ __forceinline__ void st(void* p, i64 i, int dt, float v) {
    if (dt == DTYPE_F32) {
        ((float*)p)[i] = v;
        return;
    }
    if (dt == DTYPE_I32) {
        ((int*)p)[i] = (int)v;
        return;
    }
    ((unsigned short*)p)[i] = f32_to_half(v, dt);
}

// The vector paths move 16 bytes per thread: 4 f32 or 8 16-bit values ("lanes"), chosen by
// the host only where every pointer is 16-byte aligned (einsum-cuda/src/addressing.rs).
__device__ __forceinline__ int lanes(int dt) { return dt == DTYPE_F32 || dt == DTYPE_I32 ? 4 : 8; }

// The lanes of one 16-byte vector as f32 (v[4..8) are 0 for DTYPE_F32).
__device__ __forceinline__ void unpack(uint4 u, int dt, float* v) {
    unsigned int w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        if (dt == DTYPE_F32) {
            v[k] = __uint_as_float(w[k]);
            v[4 + k] = 0.0f;
        } else {  // little endian: the lower half is the earlier element
            v[2 * k] = half_to_f32((unsigned short)(w[k] & 0xffffu), dt);
            v[2 * k + 1] = half_to_f32((unsigned short)(w[k] >> 16), dt);
        }
    }
}

// The inverse of unpack: lanes(dt) values of v rounded to dt in one 16-byte vector.
__device__ __forceinline__ uint4 pack(const float* v, int dt) {
    unsigned int w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        if (dt == DTYPE_F32) {
            w[k] = __float_as_uint(v[k]);
        } else {
            w[k] = (unsigned int)f32_to_half(v[2 * k], dt) | ((unsigned int)f32_to_half(v[2 * k + 1], dt) << 16);
        }
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// Offsets of the linear index `i` of `d.shape` in the first, second and third tensor, in
// the index type I: i64, or u32 where the host has checked that the volume and every offset
// are below 2^31 (einsum-cuda/src/addressing.rs), so that the div/mod are 32-bit. The loop is
// unrolled over MAX_RANK with a rank test so that `d` is read at fixed positions of the
// parameter space; the outermost coordinate is the quotient left (i < volume), so a rank-1
// space does no division at all.
template <typename I>
__device__ __forceinline__ void offsets(const Dims& d, I i, I* o0, I* o1, I* o2) {
    I a = 0, b = 0, c = 0;
#pragma unroll
    for (int k = MAX_RANK - 1; k > 0; --k) {
        if (k < d.rank) {
            I n = (I)d.shape[k];
            I x = i % n;
            i /= n;
            a += x * (I)d.s0[k];
            b += x * (I)d.s1[k];
            c += x * (I)d.s2[k];
        }
    }
    if (d.rank > 0) {
        a += i * (I)d.s0[0];
        b += i * (I)d.s1[0];
        c += i * (I)d.s2[0];
    }
    *o0 = a;
    *o1 = b;
    *o2 = c;
}

__device__ __forceinline__ i64 volume(const Dims& d) {
    i64 v = 1;
#pragma unroll
    for (int k = 0; k < MAX_RANK; ++k) {
        if (k < d.rank) v *= d.shape[k];
    }
    return v;
}

// A grid-stride loop of index type I over [0, n).
#define GRID_STRIDE_T(I, i, n) for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (I)gridDim.x * blockDim.x)
#define GRID_STRIDE(i, n) GRID_STRIDE_T(i64, i, n)
