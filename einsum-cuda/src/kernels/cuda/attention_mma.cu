// FlashAttention-2 on tensor cores (sm_80+), for f16 and bf16 at head dims 64 and 128
// (mirrored on the host by kernels/attention.rs, which the emulator runs).
//
// A block of MMA_WARPS warps owns MMA_ROWS query rows: HPB heads of one GQA group (they
// share a key/value head, so every K/V tile is loaded once for all of them) times
// MMA_ROWS / HPB positions; each warp owns 16 rows of one head. Key/value tiles of
// MMA_KEYS rows walk the block's visible key range [first, last) (causal tiles past the
// diagonal and keys of other packed sequences never enter it; rows inside a tile are masked
// by their own [lo, hi) from `bounds`). Per tile:
//   S = Q Kᵀ             mma.sync m16n8k16, f32 accumulation, Q fragments kept in registers;
//   online softmax       in the log2 domain (x = s · scale · log2 e), one rescale per tile;
//   O += P V             P rounded to the storage dtype (as FlashAttention-2 does), V through
//                        ldmatrix.trans.
// Tiles are copied with cp.async: V of a tile streams in while S and the softmax are
// computed, and the next K tile while P V is. Shared-memory rows are swizzled (16-byte
// chunk c of row r at chunk c ^ (r mod 8)) so that ldmatrix reads are free of bank
// conflicts. Addresses must be 16-byte aligned; the lowering only picks this kernel when
// they are. Tile sizes come from the Rust side (-DMMA_ROWS=... -DMMA_KEYS=... -DHEAD_DIM=...).
#if !defined(HEAD_DIM) || !defined(MMA_ROWS) || !defined(MMA_KEYS) || !defined(MMA_WARPS)
#error "HEAD_DIM, MMA_ROWS, MMA_KEYS and MMA_WARPS are defined by the Rust side"
#endif
#if HEAD_DIM % 64 != 0 || MMA_ROWS != 16 * MMA_WARPS || MMA_KEYS % 16 != 0
#error "unsupported tile configuration"
#endif

#define CHUNKS (HEAD_DIM / 8)  // 16-byte chunks per row

typedef unsigned int u32;
typedef unsigned short u16;

// Half-element offset of 16-byte chunk `c` of row `r` in a swizzled [rows][HEAD_DIM] tile.
__device__ __forceinline__ int swz(int r, int c) { return r * HEAD_DIM + ((c ^ (r & 7)) << 3); }

__device__ __forceinline__ u32 smem(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// 16 bytes global -> shared; `valid` false fills zeros (no global read).
__device__ __forceinline__ void cp16(u32 dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;"); }
__device__ __forceinline__ void cp_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

__device__ __forceinline__ void ldsm4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm4t(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

// d += a · b on one m16n8k16 tile.
template <bool BF16>
__device__ __forceinline__ void mma(float* d, const u32* a, u32 b0, u32 b1) {
    if (BF16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// Two f32 rounded to the storage dtype, `lo` in the low half.
template <bool BF16>
__device__ __forceinline__ u32 pack(float lo, float hi) {
    u32 r;
    if (BF16) {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    } else {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    }
    return r;
}

__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

template <bool BF16>
__device__ __forceinline__ void attention_mma(const u16* __restrict__ q, const u16* __restrict__ k,
                                              const u16* __restrict__ v, u16* __restrict__ o,
                                              const int* __restrict__ bounds, i64 nq, i64 nk, i64 heads_lo,
                                              i64 kv_lo, i64 keys_lo, i64 group, i64 hpb, float scale_log2) {
#if __CUDA_ARCH__ >= 800
    __shared__ __align__(128) u16 qs[MMA_ROWS * HEAD_DIM];
    __shared__ __align__(128) u16 ks[MMA_KEYS * HEAD_DIM];
    __shared__ __align__(128) u16 vs[MMA_KEYS * HEAD_DIM];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;  // mma fragment row group and thread in group
    const i64 positions = MMA_ROWS / hpb;   // positions per block
    const i64 warps_per_head = MMA_WARPS / hpb;
    const i64 p_block = (i64)blockIdx.x * positions;
    // Block row b (0..MMA_ROWS) is head (chunk * hpb + b / positions), position
    // p_block + b % positions; warp w owns block rows 16w..16w+15.
    const i64 head0 = (i64)blockIdx.y * hpb;
    const i64 kvh = (heads_lo + head0) / group - kv_lo;
    const i64 p_last = (p_block + positions < nq ? p_block + positions : nq) - 1;
    i64 first = bounds[2 * p_block] > keys_lo ? bounds[2 * p_block] : keys_lo;
    i64 last = bounds[2 * p_last + 1] < keys_lo + nk ? bounds[2 * p_last + 1] : keys_lo + nk;
    const u16* kv_k = k + kvh * nk * HEAD_DIM;
    const u16* kv_v = v + kvh * nk * HEAD_DIM;

    // Q tile: block row b, chunk c.
    for (int e = tid; e < MMA_ROWS * CHUNKS; e += MMA_WARPS * 32) {
        int b = e / CHUNKS, c = e % CHUNKS;
        i64 pos = p_block + b % positions, head = head0 + b / positions;
        bool ok = pos < nq;
        cp16(smem(qs + swz(b, c)), q + ((head * nq + (ok ? pos : 0)) * HEAD_DIM + c * 8), ok);
    }
    // K or V tile at key j0 into `dst`; keys at or past `last` are zeros.
    auto load_tile = [&](u16* dst, const u16* src, i64 j0) {
        for (int e = tid; e < MMA_KEYS * CHUNKS; e += MMA_WARPS * 32) {
            int r = e / CHUNKS, c = e % CHUNKS;
            bool ok = j0 + r < last;
            cp16(smem(dst + swz(r, c)), src + ((ok ? j0 + r - keys_lo : 0) * HEAD_DIM + c * 8), ok);
        }
    };
    if (first < last) load_tile(ks, kv_k, first);
    cp_commit();
    cp_wait_all();
    __syncthreads();

    // This thread's two rows (g and g + 8 of its warp's 16) and their visible keys.
    const int row0 = warp * 16 + g;
    i64 lo[2], hi[2];
    for (int i = 0; i < 2; ++i) {
        i64 b = row0 + 8 * i, pos = p_block + b % positions;
        lo[i] = pos < nq ? bounds[2 * pos] : 0;
        hi[i] = pos < nq ? bounds[2 * pos + 1] : 0;
    }
    // Q fragments: k-step kk, matrices (rows 0-7 | 8-15) x (cols 0-7 | 8-15).
    u32 qf[HEAD_DIM / 16][4];
    {
        const int mi = lane >> 3, r = lane & 7;
        for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
            ldsm4(smem(qs + swz(warp * 16 + r + (mi & 1) * 8, kk * 2 + (mi >> 1))), qf[kk][0], qf[kk][1], qf[kk][2],
                  qf[kk][3]);
        }
    }
    float acc[HEAD_DIM / 8][4];
    for (int n = 0; n < HEAD_DIM / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};

    for (i64 j0 = first; j0 < last; j0 += MMA_KEYS) {
        load_tile(vs, kv_v, j0);
        cp_commit();
        // S = Q Kᵀ for this warp's 16 rows and the tile's MMA_KEYS keys.
        float s[MMA_KEYS / 8][4];
        for (int n = 0; n < MMA_KEYS / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
        {
            const int mi = lane >> 3, r = lane & 7;
            for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
                for (int np = 0; np < MMA_KEYS / 16; ++np) {
                    u32 b0, b1, b2, b3;
                    ldsm4(smem(ks + swz(np * 16 + r + (mi >> 1) * 8, kk * 2 + (mi & 1))), b0, b1, b2, b3);
                    mma<BF16>(s[2 * np], qf[kk], b0, b1);
                    mma<BF16>(s[2 * np + 1], qf[kk], b2, b3);
                }
            }
        }
        // Mask, scale, and the online softmax (one rescale per tile).
        float mx[2] = {NEG_INF, NEG_INF};
        for (int n = 0; n < MMA_KEYS / 8; ++n) {
            for (int e = 0; e < 4; ++e) {
                int i = e >> 1;
                i64 key = j0 + n * 8 + 2 * t + (e & 1);
                float x = key >= lo[i] && key < hi[i] ? s[n][e] * scale_log2 : NEG_INF;
                s[n][e] = x;
                mx[i] = fmaxf(mx[i], x);
            }
        }
        float corr[2];
        for (int i = 0; i < 2; ++i) {
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
            float mn = fmaxf(m[i], mx[i]);
            float use = mn == NEG_INF ? 0.0f : mn;  // a row with nothing visible yet
            corr[i] = exp2_approx(m[i] - use);
            m[i] = mn;
            mx[i] = use;
        }
        for (int n = 0; n < MMA_KEYS / 8; ++n) {
            for (int e = 0; e < 4; ++e) {
                float p = exp2_approx(s[n][e] - mx[e >> 1]);
                s[n][e] = p;
            }
        }
        for (int i = 0; i < 2; ++i) {
            float sum = 0.0f;
            for (int n = 0; n < MMA_KEYS / 8; ++n) sum += s[n][2 * i] + s[n][2 * i + 1];
            l[i] = l[i] * corr[i] + sum;
        }
        for (int n = 0; n < HEAD_DIM / 8; ++n) {
            acc[n][0] *= corr[0];
            acc[n][1] *= corr[0];
            acc[n][2] *= corr[1];
            acc[n][3] *= corr[1];
        }
        cp_wait_all();  // V of this tile
        __syncthreads();  // ... visible to all, and every warp is done with K
        if (j0 + MMA_KEYS < last) load_tile(ks, kv_k, j0 + MMA_KEYS);
        cp_commit();
        // O += P V: P's accumulator layout is the A-fragment layout of the next mma.
        {
            const int mi = lane >> 3, r = lane & 7;
            for (int kk = 0; kk < MMA_KEYS / 16; ++kk) {
                u32 a[4] = {pack<BF16>(s[2 * kk][0], s[2 * kk][1]), pack<BF16>(s[2 * kk][2], s[2 * kk][3]),
                            pack<BF16>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                            pack<BF16>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
                for (int dp = 0; dp < HEAD_DIM / 16; ++dp) {
                    u32 b0, b1, b2, b3;
                    ldsm4t(smem(vs + swz(kk * 16 + r + (mi & 1) * 8, dp * 2 + (mi >> 1))), b0, b1, b2, b3);
                    mma<BF16>(acc[2 * dp], a, b0, b1);
                    mma<BF16>(acc[2 * dp + 1], a, b2, b3);
                }
            }
        }
        cp_wait_all();  // the next K tile
        __syncthreads();  // ... visible to all, and every warp is done with V
    }

    // O / l, staged through this warp's own rows of the Q tile for 16-byte stores.
    float inv[2];
    for (int i = 0; i < 2; ++i) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
        inv[i] = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    }
    for (int n = 0; n < HEAD_DIM / 8; ++n) {
        *(u32*)(qs + swz(row0, n) + 2 * t) = pack<BF16>(acc[n][0] * inv[0], acc[n][1] * inv[0]);
        *(u32*)(qs + swz(row0 + 8, n) + 2 * t) = pack<BF16>(acc[n][2] * inv[1], acc[n][3] * inv[1]);
    }
    __syncwarp();
    for (int e = lane; e < 16 * CHUNKS; e += 32) {
        int b = warp * 16 + e / CHUNKS, c = e % CHUNKS;
        i64 pos = p_block + b % positions, head = head0 + b / positions;
        if (pos < nq) {
            *(uint4*)(o + (head * nq + pos) * HEAD_DIM + c * 8) = *(const uint4*)(qs + swz(b, c));
        }
    }
#else
    __trap();  // the lowering picks this kernel only on sm_80 and later
#endif
}

// The entries take the arguments of attention_simt; `dt` is implied by the entry.
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32)
    attention_mma_f16(const void* q, const void* k, const void* v, void* o, int dt, const int* bounds, i64 nq, i64 nk,
                      i64 heads_lo, i64 kv_lo, i64 keys_lo, i64 group, i64 hpb, float scale_log2) {
    attention_mma<false>((const u16*)q, (const u16*)k, (const u16*)v, (u16*)o, bounds, nq, nk, heads_lo, kv_lo,
                         keys_lo, group, hpb, scale_log2);
}

extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32)
    attention_mma_bf16(const void* q, const void* k, const void* v, void* o, int dt, const int* bounds, i64 nq, i64 nk,
                       i64 heads_lo, i64 kv_lo, i64 keys_lo, i64 group, i64 hpb, float scale_log2) {
    attention_mma<true>((const u16*)q, (const u16*)k, (const u16*)v, (u16*)o, bounds, nq, nk, heads_lo, kv_lo,
                        keys_lo, group, hpb, scale_log2);
}
