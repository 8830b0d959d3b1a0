// Runs the memory-bound CUDA kernels' bodies (and the fused unary·binary) on the host, one thread after another (they use
// no shared memory or barriers), so that their vector and 32-bit variants are checked without
// a GPU: each must write exactly what the scalar 64-bit variant writes, for f32, f16 and bf16,
// every length up to 69 (vector tails), 1 to 8 aggregation sources with and without
// accumulation (against a left fold in f32), the fused unary·binary against the unfused
// pair run in f32 and rounded once, and random permuted or broadcast 3-d spaces.
// Driven by tests/host_cxx.rs, which prepends prelude.h to each module's full source.
#include "prelude.h"
#include <algorithm>
#include <cstdio>
#include <vector>
#include <random>
#include "kernels.h"
std::mt19937 rng(1);
struct Buf { alignas(16) unsigned char d[4096]; };
void fill(Buf& b) { for (auto& c : b.d) c = rng() & 0xff; }
// random finite values in dtype dt
void fill_vals(Buf& b, int dt) {
    for (int i = 0; i < 512; ++i) {
        float v = (float)((int)(rng() % 2000) - 1000) / 97.0f;
        if (dt == 0) memcpy(b.d + 4 * i, &v, 4);
        else if (dt == 1) { unsigned short h = host_f2h(v); memcpy(b.d + 2 * i, &h, 2); }
        else { unsigned u = __float_as_uint(v); unsigned short h = u >> 16; memcpy(b.d + 2 * i, &h, 2); }
    }
}
int fails = 0;
void check(bool ok, const char* what, int dt, int n) { if (!ok) { ++fails; printf("FAIL %s dt=%d n=%d\n", what, dt, n); } }
// element i of p (dtype dt) as f32, and f32 v stored rounded to dt as common.cuh's st does
float to_f32(const unsigned char* p, int dt, int i) {
    if (dt == 0) { float f; memcpy(&f, p + 4 * i, 4); return f; }
    unsigned short h; memcpy(&h, p + 2 * i, 2);
    return dt == 1 ? host_h2f(h) : __uint_as_float((unsigned)h << 16);
}
void from_f32(unsigned char* p, int dt, int i, float v) {
    if (dt == 0) { memcpy(p + 4 * i, &v, 4); return; }
    unsigned short h;
    if (dt == 1) h = host_f2h(v);
    else { unsigned u = __float_as_uint(v); h = (u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0 : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
    memcpy(p + 2 * i, &h, 2);
}
Dims lin(i64 n) { Dims d{}; d.rank = 1; d.shape[0] = n; for (int k = 1; k < 8; ++k) d.shape[k] = 1; d.s0[0] = d.s1[0] = d.s2[0] = 1; return d; }
int main() {
    for (int dt = 0; dt < 3; ++dt) {
        int es = dt == 0 ? 4 : 2;
        for (int n = 0; n < 70; ++n) {
            Buf x, y, z, w1, w2; fill_vals(x, dt); fill_vals(y, dt); fill(z); w1 = z; w2 = z;
            // copy
            launch(3, 4, [&] { box_copy(x.d, 0, w1.d, 0, dt, lin(n)); });
            launch(2, 3, [&] { copy_vec(x.d, w2.d, (i64)n * es); });
            check(!memcmp(w1.d, w2.d, 4096) && !memcmp(w1.d, x.d, n * es), "copy", dt, n);
            for (int op = 0; op < 5; ++op) {
                w1 = z; w2 = z;
                launch(3, 4, [&] { unary(x.d, w1.d, dt, op, 0.5f, n); });
                launch(2, 3, [&] { unary_vec(x.d, w2.d, dt, op, 0.5f, n); });
                check(!memcmp(w1.d, w2.d, 4096), "unary", dt, n);
                w1 = z; w2 = z;
                launch(3, 4, [&] { binary(x.d, y.d, w1.d, dt, op, lin(n)); });
                launch(2, 3, [&] { binary_vec(x.d, y.d, w2.d, dt, op, n); });
                check(!memcmp(w1.d, w2.d, 4096), "binary", dt, n);
            }
            // unary_binary: the vector entry writes what the scalar one does, and both write
            // the unfused pair run in f32 (unary, then binary) rounded once to dt, value for value
            for (int uop = 0; uop < 6; ++uop) for (int bop = 0; bop < 5; ++bop) for (int first = 0; first < 2; ++first) {
                w1 = z; w2 = z;
                launch(3, 4, [&] { unary_binary(x.d, y.d, w1.d, dt, uop, 0.5f, bop, first, n); });
                launch(2, 3, [&] { unary_binary_vec(x.d, y.d, w2.d, dt, uop, 0.5f, bop, first, n); });
                check(!memcmp(w1.d, w2.d, 4096), "unary_binary", dt, n);
                Buf fx, fy, fu, fr, want = z;
                for (int i = 0; i < n; ++i) {
                    float vx = to_f32(x.d, dt, i), vy = to_f32(y.d, dt, i);
                    memcpy(fx.d + 4 * i, &vx, 4); memcpy(fy.d + 4 * i, &vy, 4);
                }
                launch(1, 8, [&] { unary(fx.d, fu.d, 0, uop, 0.5f, n); });
                launch(1, 8, [&] { if (first) binary(fu.d, fy.d, fr.d, 0, bop, lin(n)); else binary(fy.d, fu.d, fr.d, 0, bop, lin(n)); });
                for (int i = 0; i < n; ++i) { float r; memcpy(&r, fr.d + 4 * i, 4); from_f32(want.d, dt, i, r); }
                // by value: fmaxf may pick either zero of max(-0, +0)
                bool same = !memcmp(w1.d + n * es, want.d + n * es, 4096 - n * es);
                for (int i = 0; i < n; ++i) {
                    float g = to_f32(w1.d, dt, i), w = to_f32(want.d, dt, i);
                    if (!(g == w || (std::isnan(g) && std::isnan(w)))) same = false;
                }
                check(same, "unary_binary-ref", dt, n);
            }
            // aggregate: k sources vs pairwise reference fold in f32
            Buf srcs[8]; for (auto& s : srcs) fill_vals(s, dt);
            for (int k = 1; k <= 8; ++k) for (int acc = 0; acc < 2; ++acc) for (int op = 0; op < 4; ++op) {
                Sources s{}; for (int j = 0; j < k; ++j) s.p[j] = srcs[j].d;
                Buf o1 = y, o2 = y;
                launch(3, 4, [&] { aggregate(s, k, acc, o1.d, dt, op, n); });
                launch(2, 3, [&] { aggregate_vec(s, k, acc, o2.d, dt, op, n); });
                check(!memcmp(o1.d, o2.d, 4096), "aggregate", dt, n);
                // reference: left fold in float
                bool ok = true;
                for (int i = 0; i < n; ++i) {
                    auto ldv = [&](const unsigned char* p) { if (dt == 0) { float f; memcpy(&f, p + 4 * i, 4); return f; } unsigned short h; memcpy(&h, p + 2 * i, 2); return dt == 1 ? host_h2f(h) : __uint_as_float((unsigned)h << 16); };
                    float a = acc ? ldv(y.d) : ldv(srcs[0].d);
                    for (int j = acc ? 0 : 1; j < k; ++j) { float b = ldv(srcs[j].d); a = op == 0 ? a + b : op == 1 ? fmaxf(a, b) : op == 2 ? fminf(a, b) : a * b; }
                    float got = ldv(o1.d);
                    float want = a;
                    if (dt == 1) want = host_h2f(host_f2h(a));
                    if (dt == 2) { unsigned u = __float_as_uint(a); u += 0x7fffu + ((u >> 16) & 1u); want = __uint_as_float((u >> 16) << 16); }
                    if (!(got == want || (std::isnan(got) && std::isnan(want)))) ok = false;
                }
                check(ok, "aggregate-ref", dt, n);
                check(!memcmp(o1.d + n * es, y.d + n * es, 4096 - n * es), "aggregate-overrun", dt, n);
            }
        }
        // strided: random 3-d permutation copies and broadcasts, 64 vs 32 bit
        for (int t = 0; t < 200; ++t) {
            Dims d{}; d.rank = 3; i64 sh[3] = {1 + rng() % 4, 1 + rng() % 4, 1 + rng() % 4};
            for (int k = 0; k < 8; ++k) d.shape[k] = k < 3 ? sh[k] : 1;
            int perm[3] = {0, 1, 2}; std::shuffle(perm, perm + 3, rng);
            i64 st[3]; i64 run = 1; for (int k = 2; k >= 0; --k) { st[perm[k]] = run; run *= sh[perm[k]]; }
            for (int k = 0; k < 3; ++k) { d.s0[k] = rng() % 3 == 0 ? 0 : st[k]; d.s1[k] = (k == 0 ? sh[1] * sh[2] : k == 1 ? sh[2] : 1); d.s2[k] = d.s1[k]; }
            Buf x, y, z, w1, w2; fill_vals(x, dt); fill_vals(y, dt); fill(z); w1 = z; w2 = z;
            launch(3, 4, [&] { box_copy(x.d, 0, w1.d, 0, dt, d); });
            launch(2, 5, [&] { box_copy32(x.d, 0, w2.d, 0, dt, d); });
            check(!memcmp(w1.d, w2.d, 4096), "box_copy32", dt, t);
            // box_copy against a host loop over the three dimensions
            bool ok = true;
            for (i64 a = 0; a < sh[0]; ++a) for (i64 b = 0; b < sh[1]; ++b) for (i64 c = 0; c < sh[2]; ++c) {
                i64 so = a * d.s0[0] + b * d.s0[1] + c * d.s0[2], dst = a * d.s1[0] + b * d.s1[1] + c * d.s1[2];
                if (memcmp(w1.d + dst * es, x.d + so * es, es)) ok = false;
            }
            check(ok, "box_copy-ref", dt, t);
            w1 = z; w2 = z;
            launch(3, 4, [&] { binary(x.d, y.d, w1.d, dt, 0, d); });
            launch(2, 5, [&] { binary32(x.d, y.d, w2.d, dt, 0, d); });
            check(!memcmp(w1.d, w2.d, 4096), "binary32", dt, t);
            Dims keep = d, over = d; keep.rank = 2; over.rank = 1; over.shape[0] = sh[2]; over.s0[0] = d.s0[2];
            keep.s1[0] = sh[1]; keep.s1[1] = 1; keep.shape[2] = 1;
            w1 = z; w2 = z;
            for (int op = 0; op < 3; ++op) {
                launch(3, 4, [&] { reduce(x.d, w1.d, dt, op, keep, over, 3.0); });
                launch(2, 5, [&] { reduce32(x.d, w2.d, dt, op, keep, over, 3.0); });
                check(!memcmp(w1.d, w2.d, 4096), "reduce32", dt, t);
            }
        }
    }
    printf("fails: %d\n", fails);
    return fails != 0;
}
