// out = s[0] ⊕ s[1] ⊕ ... ⊕ s[k-1] elementwise in one pass, for the aggregations of
// einsum_core::Aggregation: `op` is an AGG_* code, applied by the generated `agg_apply`
// (kernels/codes.rs). The sources are folded left to right in f32 and the result rounded to
// dt once; with `accumulate`, the fold starts from out's value instead (an aggregation of
// more than MAX_AGG_SOURCES sources chains launches over groups, the first writing out).
// The emulator (einsum-cuda/src/emulate.rs) folds in the same order. `aggregate` moves one
// element per step, `aggregate_vec` (chosen by the host where every pointer is 16-byte
// aligned) 16 bytes, then the scalar tail.
#define MAX_AGG_SOURCES 8

// The sources, by value (unused entries are null).
struct Sources {
    const void* p[MAX_AGG_SOURCES];
};

// Sources j in [first, k) are folded in; the loop is unrolled so that `s` is read at fixed
// positions of the parameter space.
__device__ __forceinline__ void aggregate_at(const Sources& s, int k, int accumulate, void* out, int dt, int op,
                                             i64 i) {
    float acc = ld(accumulate ? (const void*)out : s.p[0], i, dt);
    const int first = accumulate ? 0 : 1;
#pragma unroll
    for (int j = 0; j < MAX_AGG_SOURCES; ++j) {
        if (j >= first && j < k) acc = agg_apply(op, acc, ld(s.p[j], i, dt));
    }
    st(out, i, dt, acc);
}

extern "C" __global__ void aggregate(Sources s, int k, int accumulate, void* out, int dt, int op, i64 n) {
    GRID_STRIDE(i, n) {
        aggregate_at(s, k, accumulate, out, dt, op, i);
    }
}

extern "C" __global__ void aggregate_vec(Sources s, int k, int accumulate, void* out, int dt, int op, i64 n) {
    const int per = lanes(dt);
    const int first = accumulate ? 0 : 1;
    i64 nv = n / per;
    GRID_STRIDE(i, nv) {
        float acc[8], v[8];
        unpack(((const uint4*)(accumulate ? (const void*)out : s.p[0]))[i], dt, acc);
#pragma unroll
        for (int j = 0; j < MAX_AGG_SOURCES; ++j) {
            if (j >= first && j < k) {
                unpack(((const uint4*)s.p[j])[i], dt, v);
#pragma unroll
                for (int l = 0; l < 8; ++l) {
                    if (l < per) acc[l] = agg_apply(op, acc[l], v[l]);
                }
            }
        }
        ((uint4*)out)[i] = pack(acc, dt);
    }
    GRID_STRIDE(i, n - nv * per) {
        aggregate_at(s, k, accumulate, out, dt, op, nv * per + i);
    }
}
