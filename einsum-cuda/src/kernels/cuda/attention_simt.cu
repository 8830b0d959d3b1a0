// Attention on CUDA cores, for every dtype and head dim up to 256 (the tensor-core kernel,
// attention_mma.cu, takes f16/bf16 at head dims 64 and 128); mirrored on the host by
// kernels/attention.rs, which the emulator runs.
//
// A block of SIMT_WARPS warps owns SIMT_ROWS query rows of one head (SIMT_ROWS / SIMT_WARPS
// per warp) and walks the visible key range [first, last) of its rows in tiles of SIMT_KEYS
// keys, staged in shared memory in f32 (K rows padded by one word so that lanes reading
// different rows hit different banks). Per tile and row, lane j scores key j (the whole
// dot product, the query row broadcast from shared memory), the warp takes the tile's
// maximum, and the online softmax rescales once per tile (log2 domain, as the tensor-core
// kernel); lane i owns output columns i, i + 32, ..., so no thread holds a whole row and
// nothing spills at head dim 256. Tile sizes come from the Rust side.
//
// Non-finite values as einsum_ops::attention documents: the maxima propagate NaN (nan_max),
// a row whose every seen score is -inf is NaN, and P V adds only the keys a row sees, so a
// NaN or inf value of a key the row does not see never reaches it as 0 * NaN.
#if !defined(HEAD_DIM) || !defined(SIMT_ROWS) || !defined(SIMT_KEYS) || !defined(SIMT_WARPS)
#error "HEAD_DIM, SIMT_ROWS, SIMT_KEYS and SIMT_WARPS are defined by the Rust side"
#endif
#if SIMT_KEYS > 32 || SIMT_ROWS % SIMT_WARPS != 0
#error "unsupported tile configuration"
#endif

#define ROWS_PER_WARP (SIMT_ROWS / SIMT_WARPS)
#define COLS_PER_LANE ((HEAD_DIM + 31) / 32)

__device__ __forceinline__ float warp_max(float x) {
    for (int s = 16; s > 0; s >>= 1) x = nan_max(x, __shfl_xor_sync(0xffffffffu, x, s));
    return x;
}
__device__ __forceinline__ float warp_sum(float x) {
    for (int s = 16; s > 0; s >>= 1) x += __shfl_xor_sync(0xffffffffu, x, s);
    return x;
}

extern "C" __global__ void __launch_bounds__(SIMT_WARPS * 32)
    attention_simt(const void* q, const void* k, const void* v, void* o, int dt, const int* bounds, i64 nq, i64 nk,
                   i64 heads_lo, i64 kv_lo, i64 keys_lo, i64 group, i64 hpb, float scale_log2) {
    // The arguments are those of the tensor-core entries; one head per block here (hpb = 1).
    __shared__ float qs[SIMT_ROWS][HEAD_DIM];
    __shared__ float ks[SIMT_KEYS][HEAD_DIM + 1];
    __shared__ float vs[SIMT_KEYS][HEAD_DIM];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const i64 t0 = (i64)blockIdx.x * SIMT_ROWS;
    const i64 t1 = t0 + SIMT_ROWS < nq ? t0 + SIMT_ROWS : nq;
    const i64 h = blockIdx.y;
    const i64 kv_off = ((heads_lo + h) / group - kv_lo) * nk * HEAD_DIM;
    for (int e = tid; e < SIMT_ROWS * HEAD_DIM; e += SIMT_WARPS * 32) {
        i64 r = t0 + e / HEAD_DIM;
        qs[e / HEAD_DIM][e % HEAD_DIM] = r < nq ? ld(q, (h * nq + r) * HEAD_DIM + e % HEAD_DIM, dt) : 0.0f;
    }
    // Visibility bounds grow with the row, so the block sees [lo of its first row, hi of its last).
    i64 first = bounds[2 * t0] > keys_lo ? bounds[2 * t0] : keys_lo;
    i64 last = bounds[2 * (t1 - 1) + 1] < keys_lo + nk ? bounds[2 * (t1 - 1) + 1] : keys_lo + nk;
    i64 lo[ROWS_PER_WARP], hi[ROWS_PER_WARP];
    float m[ROWS_PER_WARP], l[ROWS_PER_WARP], acc[ROWS_PER_WARP][COLS_PER_LANE];
#pragma unroll
    for (int i = 0; i < ROWS_PER_WARP; ++i) {
        i64 r = t0 + warp * ROWS_PER_WARP + i;
        lo[i] = r < nq ? bounds[2 * r] : 0;
        hi[i] = r < nq ? bounds[2 * r + 1] : 0;
        m[i] = NEG_INF;
        l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < COLS_PER_LANE; ++c) acc[i][c] = 0.0f;
    }
    for (i64 j0 = first; j0 < last; j0 += SIMT_KEYS) {
        const i64 tk = last - j0 < SIMT_KEYS ? last - j0 : SIMT_KEYS;
        __syncthreads();  // every warp is done with the previous tile (and qs is written)
        for (int e = tid; e < SIMT_KEYS * HEAD_DIM; e += SIMT_WARPS * 32) {
            int row = e / HEAD_DIM, c = e % HEAD_DIM;
            bool ok = row < tk;
            i64 src = kv_off + (j0 - keys_lo + (ok ? row : 0)) * HEAD_DIM + c;
            ks[row][c] = ok ? ld(k, src, dt) : 0.0f;
            vs[row][c] = ok ? ld(v, src, dt) : 0.0f;
        }
        __syncthreads();
        const i64 key = j0 + lane;
    #pragma unroll
    for (int i = 0; i < ROWS_PER_WARP; ++i) {
            const float* qr = qs[warp * ROWS_PER_WARP + i];
            float x = NEG_INF;
            const bool visible = lane < tk && key >= lo[i] && key < hi[i];
            if (visible) {
                float s = 0.0f;
                for (int c = 0; c < HEAD_DIM; ++c) s = fmaf(qr[c], ks[lane][c], s);
                x = s * scale_log2;
            }
            float mn = nan_max(m[i], warp_max(x));
            float use = mn == NEG_INF ? 0.0f : mn;  // a row with nothing visible yet
            float corr = exp2f(m[i] - use);
            float p = exp2f(x - use);
            m[i] = mn;
            l[i] = l[i] * corr + warp_sum(p);
#pragma unroll
            for (int c = 0; c < COLS_PER_LANE; ++c) acc[i][c] *= corr;
            // Only the keys this row sees (bit j of `seen`; warp-uniform: the row is the warp's).
            const u32 seen = __ballot_sync(0xffffffffu, visible);
            for (int j = 0; j < tk; ++j) {
                float pj = __shfl_sync(0xffffffffu, p, j);
                if (!((seen >> j) & 1u)) continue;
#pragma unroll
                for (int c = 0; c < COLS_PER_LANE; ++c) {
                    int col = lane + 32 * c;
                    if (col < HEAD_DIM) acc[i][c] = fmaf(pj, vs[j][col], acc[i][c]);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < ROWS_PER_WARP; ++i) {
        i64 r = t0 + warp * ROWS_PER_WARP + i;
        if (r >= nq) continue;
        // A maximum still -inf: every seen score was -inf, and -inf - (-inf) is NaN.
        float inv = m[i] == NEG_INF ? NAN_F32 : 1.0f / l[i];
#pragma unroll
        for (int c = 0; c < COLS_PER_LANE; ++c) {
            int col = lane + 32 * c;
            if (col < HEAD_DIM) st(o, (h * nq + r) * HEAD_DIM + col, dt, acc[i][c] * inv);
        }
    }
}
