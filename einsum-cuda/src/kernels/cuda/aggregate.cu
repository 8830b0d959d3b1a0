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

// The row-wise merge of softmax partials (einsum_core::Aggregation::Softmax): every row of
// `width` elements holds the normalized values o (width - 1 of them) and then the log-sum-exp
// lse of its scores. A thread merges one row: first the lse of the sources in order, as
// einsum_core::merge_softmax_rows does pairwise (m = max NaN-propagating; both -inf: the
// values add; else lse = m + log(e^(lse_a - m) + e^(lse_b - m)) and the accumulated row and
// the new one are weighted by e^(lse_x - lse)), keeping each source's coefficient, a term
// whose weight is exactly 0 dropped; then every value o = sum of coefficient * o over the
// sources kept, in f32, rounded to dt once. The emulator (work/aggregate.rs) computes the
// same coefficients in the same order. With `accumulate`, `out` is the first source.
__device__ __forceinline__ float lse_max(float a, float b) {
    return (a != a || b != b) ? NAN_F32 : fmaxf(a, b);
}

extern "C" __global__ void aggregate_softmax(Sources s, int k, int accumulate, void* out, int dt, i64 rows,
                                             i64 width) {
    const i64 m = width - 1;
    const int first = accumulate ? 0 : 1;
    const void* start = accumulate ? (const void*)out : s.p[0];
    GRID_STRIDE(r, rows) {
        const i64 base = r * width;
        // c[0] weighs the first row (out or s.p[0]); c[j + 1] weighs s.p[j].
        float c[MAX_AGG_SOURCES + 1];
        float lse = ld(start, base + m, dt);
        c[0] = 1.0f;
#pragma unroll
        for (int j = 0; j < MAX_AGG_SOURCES; ++j) {
            c[j + 1] = 0.0f;
            if (j >= first && j < k) {
                const float lb = ld(s.p[j], base + m, dt);
                const float mx = lse_max(lse, lb);
                if (mx == NEG_INF) {
                    c[j + 1] = 1.0f;
                } else {
                    const float l = mx + logf(expf(lse - mx) + expf(lb - mx));
                    const float wa = expf(lse - l), wb = expf(lb - l);
#pragma unroll
                    for (int i = 0; i <= MAX_AGG_SOURCES; ++i) {
                        if (i <= j) c[i] = (wa == 0.0f || c[i] == 0.0f) ? 0.0f : c[i] * wa;
                    }
                    c[j + 1] = wb;
                    lse = l;
                }
            }
        }
        for (i64 e = 0; e < m; ++e) {
            float acc = c[0] != 0.0f ? c[0] * ld(start, base + e, dt) : 0.0f;
#pragma unroll
            for (int j = 0; j < MAX_AGG_SOURCES; ++j) {
                if (j >= first && j < k && c[j + 1] != 0.0f) acc += c[j + 1] * ld(s.p[j], base + e, dt);
            }
            st(out, base + e, dt, acc);
        }
        st(out, base + m, dt, lse);
    }
}
