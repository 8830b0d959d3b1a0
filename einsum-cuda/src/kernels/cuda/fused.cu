// y = x ⊙ b where one operand of the binary ⊙ is a unary f of x: y = f(x) ⊙ b (`first` != 0)
// or y = b ⊙ f(x) (`first` == 0), all three blocks of one shape and contiguous. The fused
// SiLU·mul of a gated FFN (and every other unary → binary pair the fusion pass finds,
// einsum-cuda/src/fusion.rs). f(x) stays in f32: the result is rounded to the element type
// once, at the store (the two unfused kernels rounded f(x) to it in between). `uop`, `s` are
// unary_apply's code and scalar, `bop` binary_apply's code (kernels/codes.rs).
// `unary_binary` moves one element per step, `unary_binary_vec` (chosen by the host where
// the three pointers are 16-byte aligned) 16 bytes, then the scalar tail.

__device__ __forceinline__ float unary_binary_apply(int uop, float s, int bop, int first, float x, float b) {
    float u = unary_apply(uop, x, s);
    return first ? binary_apply(bop, u, b) : binary_apply(bop, b, u);
}

extern "C" __global__ void unary_binary(const void* x, const void* b, void* y, int dt, int uop, float s, int bop,
                                        int first, i64 n) {
    GRID_STRIDE(i, n) {
        st(y, i, dt, unary_binary_apply(uop, s, bop, first, ld(x, i, dt), ld(b, i, dt)));
    }
}

extern "C" __global__ void unary_binary_vec(const void* x, const void* b, void* y, int dt, int uop, float s, int bop,
                                            int first, i64 n) {
    const int per = lanes(dt);
    i64 nv = n / per;
    GRID_STRIDE(i, nv) {
        float vx[8], vb[8];
        unpack(((const uint4*)x)[i], dt, vx);
        unpack(((const uint4*)b)[i], dt, vb);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            if (k < per) vx[k] = unary_binary_apply(uop, s, bop, first, vx[k], vb[k]);
        }
        ((uint4*)y)[i] = pack(vx, dt);
    }
    GRID_STRIDE(i, n - nv * per) {
        i64 j = nv * per + i;
        st(y, j, dt, unary_binary_apply(uop, s, bop, first, ld(x, j, dt), ld(b, j, dt)));
    }
}
