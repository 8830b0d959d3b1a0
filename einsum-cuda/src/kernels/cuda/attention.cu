// FlashAttention-style attention on one block (mirrors einsum_ops::attention): for every
// query head of the block and tile of ATT_BQ query rows, walks the visible key tiles of
// ATT_BK rows (staged in shared memory, in f32) keeping a running maximum and sum per row
// (online softmax), so no score matrix is formed. Causal masks, packed sequences and the
// query split come in through `bounds`: the absolute visible key range [lo, hi) of every
// query row of the block, computed on the host from the packing. GQA: absolute query head h
// reads key/value head h / group. HEAD_DIM is fixed per compilation (-DHEAD_DIM=...).
#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#define ATT_BQ 64
// Key rows per shared-memory tile: K and V tiles stay within the 48 KiB of static shared memory.
#define ATT_BK (HEAD_DIM > 128 ? 16 : 32)

extern "C" __global__ void attention(const void* q, const void* k, const void* v, void* o, int dt, const int* bounds,
                                     i64 nq, i64 nk, i64 heads_lo, i64 kv_lo, i64 keys_lo, i64 group, float scale) {
    __shared__ float ks[ATT_BK][HEAD_DIM];
    __shared__ float vs[ATT_BK][HEAD_DIM];
    i64 t0 = (i64)blockIdx.x * ATT_BQ;
    i64 r = t0 + threadIdx.x;
    i64 h = heads_lo + blockIdx.y;
    i64 kvh = h / group - kv_lo;
    bool live = r < nq;
    const i64 q_off = ((i64)blockIdx.y * nq + r) * HEAD_DIM;
    const i64 kv_off = kvh * nk * HEAD_DIM;
    float qr[HEAD_DIM], acc[HEAD_DIM];
    int lo = 0, hi = 0;
    if (live) {
        for (int c = 0; c < HEAD_DIM; ++c) {
            qr[c] = ld(q, q_off + c, dt) * scale;
            acc[c] = 0.0f;
        }
        lo = bounds[2 * r];
        hi = bounds[2 * r + 1];
    }
    i64 t1 = t0 + ATT_BQ < nq ? t0 + ATT_BQ : nq;
    // Visibility bounds grow with the row, so the tile sees [lo of its first row, hi of its last).
    i64 first = bounds[2 * t0] > keys_lo ? bounds[2 * t0] : keys_lo;
    i64 last = bounds[2 * (t1 - 1) + 1];
    if (last > keys_lo + nk) last = keys_lo + nk;
    float m = NEG_INF, l = 0.0f;
    for (i64 j0 = first; j0 < last; j0 += ATT_BK) {
        i64 tk = last - j0 < ATT_BK ? last - j0 : ATT_BK;
        for (i64 e = threadIdx.x; e < tk * HEAD_DIM; e += blockDim.x) {
            i64 row = e / HEAD_DIM, c = e % HEAD_DIM;
            i64 src = kv_off + (j0 - keys_lo + row) * HEAD_DIM + c;
            ks[row][c] = ld(k, src, dt);
            vs[row][c] = ld(v, src, dt);
        }
        __syncthreads();
        if (live) {
            for (i64 j = 0; j < tk; ++j) {
                i64 key = j0 + j;
                if (key < lo || key >= hi) continue;
                float s = 0.0f;
                for (int c = 0; c < HEAD_DIM; ++c) s += qr[c] * ks[j][c];
                float nm = fmaxf(m, s);
                float corr = m == NEG_INF ? 0.0f : expf(m - nm);
                float p = expf(s - nm);
                l = l * corr + p;
                for (int c = 0; c < HEAD_DIM; ++c) acc[c] = acc[c] * corr + p * vs[j][c];
                m = nm;
            }
        }
        __syncthreads();
    }
    if (live) {
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int c = 0; c < HEAD_DIM; ++c) st(o, q_off + c, dt, acc[c] * inv);
    }
}
