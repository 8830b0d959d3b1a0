// FlashAttention-2 on tensor cores (sm_80+), for f16 and bf16 at head dims 64 and 128
// (mirrored on the host by kernels/attention.rs, which the emulator runs).
//
// A block of MMA_WARPS warps owns MMA_ROWS query rows: HPB heads of one GQA group (they
// share a key/value head, so every K/V tile is loaded once for all of them) times
// MMA_ROWS / HPB positions; each warp owns WARP_ROWS = 16 * MMA_WARP_M rows (MMA_WARP_M
// row tiles of 16), so that every K or V fragment read from shared memory feeds
// 2 * MMA_WARP_M mma instructions. Key/value tiles of MMA_KEYS rows walk the block's visible
// key range [first, last) (causal tiles past the diagonal and keys of other packed sequences
// never enter it; rows inside a tile are masked by their own [lo, hi) from `bounds`). Per
// tile and warp:
//   skip                 a tile no row of the warp sees does no arithmetic (the block's
//                        causal diagonal, other sequences' keys);
//   S = Q Kᵀ             mma.sync m16n8k16, f32 accumulation, Q fragments read from shared
//                        memory (registers hold the output accumulators instead);
//   mask                 only where the tile is not wholly visible to every row of the warp;
//   online softmax       in the log2 domain (x = s · scale · log2 e), one rescale per tile;
//   O += P V             P rounded to the storage dtype (as FlashAttention-2 does), V through
//                        ldmatrix.trans.
// Tiles are copied with cp.async: V of a tile streams in while S and the softmax are
// computed, and the next K tile while P V is. Shared-memory rows are swizzled (16-byte
// chunk c of row r at chunk c ^ (r mod 8)) so that ldmatrix reads are free of bank
// conflicts. The Q, K and V tiles are dynamic shared memory (more than the 48 KiB of static
// shared memory at head dim 128; the host raises the kernel's limit). Blocks are taken from
// the last query rows down, so under a causal mask the longest run first. Addresses must be
// 16-byte aligned; the lowering only picks this kernel when they are. Tile sizes come from
// the Rust side (-DMMA_ROWS=... -DMMA_KEYS=... -DMMA_WARPS=... -DMMA_WARP_M=... -DHEAD_DIM=...).
// Non-finite values: the maxima propagate NaN (nan_max) and a row whose every seen score is
// -inf is NaN, as einsum_ops::attention documents. One difference remains: P V multiplies
// the whole tile, so a NaN or inf in the value of a key that a row of the tile does not see
// reaches that row as 0 * NaN (the CUDA-core kernel and the CPU add only seen keys).
#if !defined(HEAD_DIM) || !defined(MMA_ROWS) || !defined(MMA_KEYS) || !defined(MMA_WARPS) || !defined(MMA_WARP_M)
#error "HEAD_DIM, MMA_ROWS, MMA_KEYS, MMA_WARPS and MMA_WARP_M are defined by the Rust side"
#endif
#if HEAD_DIM % 64 != 0 || MMA_ROWS != 16 * MMA_WARP_M * MMA_WARPS || MMA_KEYS % 16 != 0
#error "unsupported tile configuration"
#endif

#define WARP_ROWS (16 * MMA_WARP_M)  // query rows per warp
#define CHUNKS (HEAD_DIM / 8)  // 16-byte chunks per row
#define TILE_STEP (MMA_WARPS * 32 / CHUNKS)  // rows between the chunks one thread copies
#if TILE_STEP % 8 != 0 || MMA_KEYS % TILE_STEP != 0
#error "unsupported tile configuration"
#endif

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

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

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
    extern __shared__ __align__(128) u16 tiles[];
    u16* qs = tiles;                     // [MMA_ROWS][HEAD_DIM]
    u16* ks = qs + MMA_ROWS * HEAD_DIM;  // [MMA_KEYS][HEAD_DIM]
    u16* vs = ks + MMA_KEYS * HEAD_DIM;  // [MMA_KEYS][HEAD_DIM]
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;  // mma fragment row group and thread in group
    const int mi = lane >> 3, r = lane & 7;  // ldmatrix: this lane's matrix and row in it
    const i64 positions = MMA_ROWS / hpb;   // positions per block
    // The last query rows first (see the top of the file).
    const i64 p_block = (i64)(gridDim.x - 1 - blockIdx.x) * positions;
    // Block row b (0..MMA_ROWS) is head (chunk * hpb + b / positions), position
    // p_block + b % positions; warp w owns block rows WARP_ROWS * w .. WARP_ROWS * (w + 1).
    const i64 head0 = (i64)blockIdx.y * hpb;
    const i64 kvh = (heads_lo + head0) / group - kv_lo;
    const i64 p_last = (p_block + positions < nq ? p_block + positions : nq) - 1;
    // Keys are absolute positions, which `bounds` holds as 32-bit ints.
    const int first = bounds[2 * p_block] > keys_lo ? bounds[2 * p_block] : (int)keys_lo;
    const int last = bounds[2 * p_last + 1] < keys_lo + nk ? bounds[2 * p_last + 1] : (int)(keys_lo + nk);
    const u16* kv_k = k + kvh * nk * HEAD_DIM;
    const u16* kv_v = v + kvh * nk * HEAD_DIM;
    // Shared-memory byte addresses of the tiles: every ldmatrix and cp.async address below is
    // one of these plus a lane constant and a compile-time offset (the swizzle of row r is
    // r mod 8, which for every row a lane touches is the same lane constant), so the loops
    // spend no integer work recomputing addresses.
    const u32 qs_a = smem(qs), ks_a = smem(ks), vs_a = smem(vs);

    // Q tile: block row b, chunk c.
    for (int e = tid; e < MMA_ROWS * CHUNKS; e += MMA_WARPS * 32) {
        int b = e / CHUNKS, c = e % CHUNKS;
        i64 pos = p_block + b % positions, head = head0 + b / positions;
        bool ok = pos < nq;
        cp16(smem(qs + swz(b, c)), q + ((head * nq + (ok ? pos : 0)) * HEAD_DIM + c * 8), ok);
    }
    // K or V tile at key j0 into the tile at `dst`; keys at or past `last` are zeros. Thread
    // tid copies chunk tid % CHUNKS of rows tid / CHUNKS + TILE_STEP i (TILE_STEP a multiple
    // of 8, so all its rows share one swizzle).
    const int tr = tid / CHUNKS, tc = tid % CHUNKS;
    const u32 tile_off = 2 * swz(tr, tc);
    auto load_tile = [&](u32 dst, const u16* src, int j0) {
        const u16* from = src + ((i64)(j0 - keys_lo + tr) * HEAD_DIM + tc * 8);
#pragma unroll
        for (int i = 0; i < MMA_KEYS / TILE_STEP; ++i) {
            bool ok = j0 + tr + TILE_STEP * i < last;
            cp16(dst + tile_off + 2 * TILE_STEP * HEAD_DIM * i, ok ? from + TILE_STEP * HEAD_DIM * i : src, ok);
        }
    };
    if (first < last) load_tile(ks_a, kv_k, first);
    cp_commit();

    // This thread's rows: row tile mt, half i is block row row0 + 16 mt + 8 i; their visible
    // keys, and over the warp's rows the smallest and largest of both ends (a row past nq
    // sees nothing: [0, 0)).
    const int row0 = warp * WARP_ROWS + g;
    int lo[MMA_WARP_M][2], hi[MMA_WARP_M][2];
    int lo_min = 0x7fffffff, lo_max = 0, hi_min = 0x7fffffff, hi_max = 0;
#pragma unroll
    for (int mt = 0; mt < MMA_WARP_M; ++mt) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            i64 b = row0 + 16 * mt + 8 * i, pos = p_block + b % positions;
            int a = pos < nq ? bounds[2 * pos] : 0, z = pos < nq ? bounds[2 * pos + 1] : 0;
            lo[mt][i] = a;
            hi[mt][i] = z;
            lo_min = imin(lo_min, a);
            lo_max = imax(lo_max, a);
            hi_min = imin(hi_min, z);
            hi_max = imax(hi_max, z);
        }
    }
#pragma unroll
    for (int x = 1; x < 32; x <<= 1) {
        lo_min = imin(lo_min, __shfl_xor_sync(0xffffffffu, lo_min, x));
        lo_max = imax(lo_max, __shfl_xor_sync(0xffffffffu, lo_max, x));
        hi_min = imin(hi_min, __shfl_xor_sync(0xffffffffu, hi_min, x));
        hi_max = imax(hi_max, __shfl_xor_sync(0xffffffffu, hi_max, x));
    }
    cp_wait_all();
    __syncthreads();

    // ldmatrix addresses: this lane's row of its 8x8 matrix and its swizzled chunk. Q (the
    // A operand: matrices rows 0-7/8-15 x chunks 0/1), K (B: keys 0-7/8-15 x chunks 0/1,
    // the other order) and V (B transposed: keys 0-7/8-15 x chunks 0/1, as Q).
    const u32 q_lane = qs_a + 2 * HEAD_DIM * (warp * WARP_ROWS + r + (mi & 1) * 8);
    const u32 k_lane = ks_a + 2 * HEAD_DIM * (r + (mi >> 1) * 8);
    const u32 v_lane = vs_a + 2 * HEAD_DIM * (r + (mi & 1) * 8);
    const u32 q_swz = (mi >> 1) ^ r, k_swz = (mi & 1) ^ r, v_swz = (mi >> 1) ^ r;

    float acc[MMA_WARP_M][HEAD_DIM / 8][4];
    float m[MMA_WARP_M][2], l[MMA_WARP_M][2];
#pragma unroll
    for (int mt = 0; mt < MMA_WARP_M; ++mt) {
#pragma unroll
        for (int n = 0; n < HEAD_DIM / 8; ++n) acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.0f;
        m[mt][0] = m[mt][1] = NEG_INF;
        l[mt][0] = l[mt][1] = 0.0f;
    }

    for (int j0 = first; j0 < last; j0 += MMA_KEYS) {
        load_tile(vs_a, kv_v, j0);
        cp_commit();
        // Warp-uniform: no row of the warp sees a key of the tile, or every row sees all.
        const bool skip = j0 >= hi_max || j0 + MMA_KEYS <= lo_min;
        const bool whole = j0 >= lo_max && j0 + MMA_KEYS <= hi_min && j0 + MMA_KEYS <= last;
        float s[MMA_WARP_M][MMA_KEYS / 8][4];
        if (!skip) {
            // S = Q Kᵀ for this warp's rows and the tile's MMA_KEYS keys.
#pragma unroll
            for (int mt = 0; mt < MMA_WARP_M; ++mt) {
#pragma unroll
                for (int n = 0; n < MMA_KEYS / 8; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
            }
                        // (kk indexes shared memory only: unrolled by two, which leaves ptxas the registers
            // the accumulators need at head dim 128.)
#pragma unroll 2
            for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
                u32 qf[MMA_WARP_M][4];
#pragma unroll
                for (int mt = 0; mt < MMA_WARP_M; ++mt) {
                    ldsm4(q_lane + 32 * HEAD_DIM * mt + (((2 * kk) ^ q_swz) << 4), qf[mt][0], qf[mt][1], qf[mt][2],
                          qf[mt][3]);
                }
#pragma unroll
                for (int np = 0; np < MMA_KEYS / 16; ++np) {
                    u32 b0, b1, b2, b3;
                    ldsm4(k_lane + 32 * HEAD_DIM * np + (((2 * kk) ^ k_swz) << 4), b0, b1, b2, b3);
#pragma unroll
                    for (int mt = 0; mt < MMA_WARP_M; ++mt) {
                        mma<BF16>(s[mt][2 * np], qf[mt], b0, b1);
                        mma<BF16>(s[mt][2 * np + 1], qf[mt], b2, b3);
                    }
                }
            }
            // Scale, mask (unless the tile is whole), and the online softmax (one rescale per
            // tile).
#pragma unroll
            for (int mt = 0; mt < MMA_WARP_M; ++mt) {
                float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
                for (int n = 0; n < MMA_KEYS / 8; ++n) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        int i = e >> 1;
                        float x = s[mt][n][e] * scale_log2;
                        if (!whole) {
                            int key = j0 + n * 8 + 2 * t + (e & 1);
                            x = key >= lo[mt][i] && key < hi[mt][i] && key < last ? x : NEG_INF;
                        }
                        s[mt][n][e] = x;
                        mx[i] = nan_max(mx[i], x);
                    }
                }
                float corr[2];
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    mx[i] = nan_max(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
                    mx[i] = nan_max(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
                    float mn = nan_max(m[mt][i], mx[i]);
                    float use = mn == NEG_INF ? 0.0f : mn;  // a row with nothing visible yet
                    corr[i] = exp2_approx(m[mt][i] - use);
                    m[mt][i] = mn;
                    mx[i] = use;
                }
                float sum[2] = {0.0f, 0.0f};
#pragma unroll
                for (int n = 0; n < MMA_KEYS / 8; ++n) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        float p = exp2_approx(s[mt][n][e] - mx[e >> 1]);
                        s[mt][n][e] = p;
                        sum[e >> 1] += p;
                    }
                }
#pragma unroll
                for (int i = 0; i < 2; ++i) l[mt][i] = l[mt][i] * corr[i] + sum[i];
                // Rescaling by 1 is the identity: once the running maxima settle, most tiles
                // change none of the warp's rows, and skip it.
                if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
                    for (int n = 0; n < HEAD_DIM / 8; ++n) {
                        acc[mt][n][0] *= corr[0];
                        acc[mt][n][1] *= corr[0];
                        acc[mt][n][2] *= corr[1];
                        acc[mt][n][3] *= corr[1];
                    }
                }
            }
        }
        cp_wait_all();  // V of this tile
        __syncthreads();  // ... visible to all, and every warp is done with K
        if (j0 + MMA_KEYS < last) load_tile(ks_a, kv_k, j0 + MMA_KEYS);
        cp_commit();
        if (!skip) {
            // O += P V: P's accumulator layout is the A-fragment layout of the next mma.
#pragma unroll
            for (int kk = 0; kk < MMA_KEYS / 16; ++kk) {
                u32 a[MMA_WARP_M][4];
#pragma unroll
                for (int mt = 0; mt < MMA_WARP_M; ++mt) {
                    a[mt][0] = pack<BF16>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                    a[mt][1] = pack<BF16>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                    a[mt][2] = pack<BF16>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                    a[mt][3] = pack<BF16>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
                }
#pragma unroll
                for (int dp = 0; dp < HEAD_DIM / 16; ++dp) {
                    u32 b0, b1, b2, b3;
                    ldsm4t(v_lane + 32 * HEAD_DIM * kk + (((2 * dp) ^ v_swz) << 4), b0, b1, b2, b3);
#pragma unroll
                    for (int mt = 0; mt < MMA_WARP_M; ++mt) {
                        mma<BF16>(acc[mt][2 * dp], a[mt], b0, b1);
                        mma<BF16>(acc[mt][2 * dp + 1], a[mt], b2, b3);
                    }
                }
            }
        }
        cp_wait_all();  // the next K tile
        __syncthreads();  // ... visible to all, and every warp is done with V
    }

    // O / l, staged through this warp's own rows of the Q tile (only this warp reads them)
    // for 16-byte stores.
#pragma unroll
    for (int mt = 0; mt < MMA_WARP_M; ++mt) {
        float inv[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            float li = l[mt][i];
            li += __shfl_xor_sync(0xffffffffu, li, 1);
            li += __shfl_xor_sync(0xffffffffu, li, 2);
            // A maximum still -inf: every seen score was -inf, and -inf - (-inf) is NaN.
            inv[i] = m[mt][i] == NEG_INF ? NAN_F32 : 1.0f / li;
        }
        const int rt = row0 + 16 * mt;
#pragma unroll
        for (int n = 0; n < HEAD_DIM / 8; ++n) {
            *(u32*)(qs + swz(rt, n) + 2 * t) = pack<BF16>(acc[mt][n][0] * inv[0], acc[mt][n][1] * inv[0]);
            *(u32*)(qs + swz(rt + 8, n) + 2 * t) = pack<BF16>(acc[mt][n][2] * inv[1], acc[mt][n][3] * inv[1]);
        }
    }
    __syncwarp();
    for (int e = lane; e < WARP_ROWS * CHUNKS; e += 32) {
        int b = warp * WARP_ROWS + e / CHUNKS, c = e % CHUNKS;
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
