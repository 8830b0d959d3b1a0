// Row-wise normalisations over the middle axis of an [outer, n, inner] block: softmax,
// RMSNorm (also of a slice of each row: rmsnorm_slice) and LayerNorm. One warp per (outer,
// inner) fibre; lanes stride over n and reduce with shuffles, in f32 (as the CPU reference
// does). The softmax row maximum propagates NaN
// (nan_max): a row holding a NaN is NaN, one holding +inf is NaN (inf - inf), as NumPy's
// exp(x - max) / sum.
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// The fibre of this warp, or -1 when past the end; base offset and stride of its n axis.
__device__ __forceinline__ i64 fibre(i64 outer, i64 n, i64 inner, i64* base) {
    i64 w = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (w >= outer * inner) return -1;
    i64 o = w / inner, in = w % inner;
    *base = o * n * inner + in;
    return w;
}

extern "C" __global__ void softmax(const void* x, void* y, int dt, i64 outer, i64 n, i64 inner) {
    i64 base;
    if (fibre(outer, n, inner, &base) < 0) return;
    int lane = threadIdx.x % 32;
    float m = NEG_INF;
    for (i64 j = lane; j < n; j += 32) m = nan_max(m, ld(x, base + j * inner, dt));
    m = warp_max(m);
    float s = 0.0f;
    for (i64 j = lane; j < n; j += 32) s += expf(ld(x, base + j * inner, dt) - m);
    s = warp_sum(s);
    for (i64 j = lane; j < n; j += 32) st(y, base + j * inner, dt, expf(ld(x, base + j * inner, dt) - m) / s);
}

extern "C" __global__ void rmsnorm(const void* x, const void* w, void* y, int dt, i64 outer, i64 n, i64 inner, float eps) {
    i64 base;
    if (fibre(outer, n, inner, &base) < 0) return;
    int lane = threadIdx.x % 32;
    float s = 0.0f;
    for (i64 j = lane; j < n; j += 32) {
        float v = ld(x, base + j * inner, dt);
        s += v * v;
    }
    s = warp_sum(s);
    float scale = 1.0f / sqrtf(s / (float)n + eps);
    for (i64 j = lane; j < n; j += 32) st(y, base + j * inner, dt, ld(x, base + j * inner, dt) * scale * ld(w, j, dt));
}

// RMSNorm of an output-only split of the axis: each row's scale comes from the whole row of
// x (n wide), but only its columns [lo, lo + m) are normalised and written, with the weight
// block being those m columns and the output's rows m wide ([outer, m, inner]). `rmsnorm`
// above is the unsplit case (lo = 0, m = n), launched as before.
extern "C" __global__ void rmsnorm_slice(const void* x, const void* w, void* y, int dt, i64 outer, i64 n, i64 inner,
                                         float eps, i64 lo, i64 m) {
    i64 base;
    i64 f = fibre(outer, n, inner, &base);
    if (f < 0) return;
    int lane = threadIdx.x % 32;
    float s = 0.0f;
    for (i64 j = lane; j < n; j += 32) {
        float v = ld(x, base + j * inner, dt);
        s += v * v;
    }
    s = warp_sum(s);
    float scale = 1.0f / sqrtf(s / (float)n + eps);
    i64 out = (f / inner) * m * inner + f % inner;
    for (i64 j = lane; j < m; j += 32) st(y, out + j * inner, dt, ld(x, base + (lo + j) * inner, dt) * scale * ld(w, j, dt));
}

extern "C" __global__ void layernorm(const void* x, const void* w, const void* b, void* y, int dt, i64 outer, i64 n,
                                     i64 inner, float eps) {
    i64 base;
    if (fibre(outer, n, inner, &base) < 0) return;
    int lane = threadIdx.x % 32;
    float s = 0.0f;
    for (i64 j = lane; j < n; j += 32) s += ld(x, base + j * inner, dt);
    float mean = warp_sum(s) / (float)n;
    float v = 0.0f;
    for (i64 j = lane; j < n; j += 32) {
        float d = ld(x, base + j * inner, dt) - mean;
        v += d * d;
    }
    float scale = 1.0f / sqrtf(warp_sum(v) / (float)n + eps);
    for (i64 j = lane; j < n; j += 32) {
        float r = (ld(x, base + j * inner, dt) - mean) * scale * ld(w, j, dt) + ld(b, j, dt);
        st(y, base + j * inner, dt, r);
    }
}

// RMSNorm of a ⊙ b (the binary `op`, e.g. the residual add before a norm) in one pass over
// the rows: y = v · w / sqrt(mean(v²) + eps) with v = a ⊙ b in f32, and, where `sum` is not
// null, v rounded to the element type stored there too (for the sum's later readers). The
// norm uses v unrounded: the unfused add rounded it to the element type before the norm.
// Built by the fusion pass (einsum-cuda/src/fusion.rs) from a binary and the RMSNorm
// reading its result.
extern "C" __global__ void binary_rmsnorm(const void* a, const void* b, const void* w, void* sum, void* y, int dt,
                                          int op, i64 outer, i64 n, i64 inner, float eps) {
    i64 base;
    if (fibre(outer, n, inner, &base) < 0) return;
    int lane = threadIdx.x % 32;
    float s = 0.0f;
    for (i64 j = lane; j < n; j += 32) {
        i64 at = base + j * inner;
        float v = binary_apply(op, ld(a, at, dt), ld(b, at, dt));
        if (sum) st(sum, at, dt, v);
        s += v * v;
    }
    s = warp_sum(s);
    float scale = 1.0f / sqrtf(s / (float)n + eps);
    for (i64 j = lane; j < n; j += 32) {
        i64 at = base + j * inner;
        st(y, at, dt, binary_apply(op, ld(a, at, dt), ld(b, at, dt)) * scale * ld(w, j, dt));
    }
}
