// NaN and the infinities through the memory-bound kernels' CUDA C on the host (driven by
// tests/host_cxx.rs, which prepends prelude.h to each module's full source): relu,
// max, the Max and Min aggregations and the Max reduction propagate NaN as NumPy's maximum,
// minimum and max do, on the scalar, vector and 32-bit entries, in f32, f16 and bf16. Each
// failure prints what it checked; the last line is "fails: N".
#include "prelude.h"
#include <cstdio>
#include <initializer_list>
#include "kernels.h"
// The codes of kernels/codes.rs (the generated header is in each module, not here).
enum { F32 = 0, F16 = 1, BF16 = 2, RELU = 0, MAX = 4, AGG_MAX = 1, AGG_MIN = 2, REDUCE_MAX = 1, REDUCE_MEAN = 2 };
const float NaN = __int_as_float(0x7fc00000), Inf = __int_as_float(0x7f800000);
int fails = 0;
struct Buf {
    alignas(16) unsigned char d[1024];
    Buf() { memset(d, 0xee, sizeof d); }
};
void put(Buf& b, int dt, int i, float v) {
    if (dt == F32) { memcpy(b.d + 4 * i, &v, 4); return; }
    unsigned short h = dt == F16 ? host_f2h(v) : (unsigned short)(__float_as_uint(v) >> 16);  // NaN, inf and the
    memcpy(b.d + 2 * i, &h, 2);                                                                // values below are exact
}
float get(const Buf& b, int dt, int i) {
    if (dt == F32) { float f; memcpy(&f, b.d + 4 * i, 4); return f; }
    unsigned short h; memcpy(&h, b.d + 2 * i, 2);
    return dt == F16 ? host_h2f(h) : __uint_as_float((unsigned)h << 16);
}
Buf of(int dt, const float* v, int n) { Buf b; for (int i = 0; i < n; ++i) put(b, dt, i, v[i]); return b; }
// NaN equals NaN; otherwise equal values (of one sign for zeros too).
bool same(float g, float w) { return (g != g && w != w) || (g == w && std::signbit(g) == std::signbit(w)); }
void expect(const Buf& got, int dt, const float* want, int n, const char* what) {
    for (int i = 0; i < n; ++i) {
        float g = get(got, dt, i);
        if (!same(g, want[i])) { ++fails; printf("FAIL %s dt=%d element %d: %g, want %g\n", what, dt, i, g, want[i]); }
    }
}
Dims lin(i64 n) { Dims d{}; d.rank = 1; d.shape[0] = n; for (int k = 1; k < 8; ++k) d.shape[k] = 1; d.s0[0] = d.s1[0] = d.s2[0] = 1; return d; }
int main() {
    // 16 elements: both lanes' widths (4 f32, 8 halves) are full vectors, and 3 more a tail.
    const int n = 19;
    const float x[n] = {NaN, -Inf, Inf, -1, 2, -0.0f, 0, NaN, 3, -2, NaN, 1, -Inf, 5, -5, 0.5f, NaN, -1, Inf};
    const float y[n] = {1, NaN, NaN, -Inf, NaN, 0, -0.0f, 2, Inf, -3, NaN, 0.5f, -Inf, NaN, -6, 4, -1, NaN, 1};
    float relu[n], mx[n], mn[n];
    for (int i = 0; i < n; ++i) {
        float a = x[i], b = y[i];
        relu[i] = (a != a) ? a : (a >= 0 ? a : 0.0f);
        mx[i] = (a != a || b != b) ? NaN : (a >= b ? a : b);
        mn[i] = (a != a || b != b) ? NaN : (a <= b ? a : b);
    }
    for (int dt = 0; dt < 3; ++dt) {
        Buf bx = of(dt, x, n), by = of(dt, y, n);
        Buf o1, o2, o3;
        launch(3, 4, [&] { unary(bx.d, o1.d, dt, RELU, 0.0f, n); });
        launch(2, 3, [&] { unary_vec(bx.d, o2.d, dt, RELU, 0.0f, n); });
        expect(o1, dt, relu, n, "unary relu");
        expect(o2, dt, relu, n, "unary_vec relu");
        o1 = Buf(); o2 = Buf();
        launch(3, 4, [&] { binary(bx.d, by.d, o1.d, dt, MAX, lin(n)); });
        launch(2, 5, [&] { binary32(bx.d, by.d, o2.d, dt, MAX, lin(n)); });
        launch(2, 3, [&] { binary_vec(bx.d, by.d, o3.d, dt, MAX, n); });
        expect(o1, dt, mx, n, "binary max");
        expect(o2, dt, mx, n, "binary32 max");
        expect(o3, dt, mx, n, "binary_vec max");
        // max(relu(x), y), fused.
        float fused[n];
        for (int i = 0; i < n; ++i) { float a = relu[i], b = y[i]; fused[i] = (a != a || b != b) ? NaN : (a >= b ? a : b); }
        o1 = Buf(); o2 = Buf();
        launch(3, 4, [&] { unary_binary(bx.d, by.d, o1.d, dt, RELU, 0.0f, MAX, 1, n); });
        launch(2, 3, [&] { unary_binary_vec(bx.d, by.d, o2.d, dt, RELU, 0.0f, MAX, 1, n); });
        expect(o1, dt, fused, n, "unary_binary relu-max");
        expect(o2, dt, fused, n, "unary_binary_vec relu-max");
        // Aggregations of x, y and a finite third source, from the first source and
        // accumulating into out (holding y): a NaN in any source is the result.
        float z[n];
        for (int i = 0; i < n; ++i) z[i] = (float)(i % 5) - 2.0f;
        Buf bz = of(dt, z, n);
        for (int op : {AGG_MAX, AGG_MIN}) {
            // NumPy's maximum / minimum: the first operand where it is NaN, wins or ties.
            auto agg = [&](float a, float b) {
                return (a != a || (op == AGG_MAX ? a >= b : a <= b)) ? a : b;
            };
            float want[n], want_acc[n];
            for (int i = 0; i < n; ++i) {
                want[i] = agg(agg(x[i], y[i]), z[i]);
                want_acc[i] = agg(agg(y[i], x[i]), z[i]);
            }
            Sources s{}; s.p[0] = bx.d; s.p[1] = by.d; s.p[2] = bz.d;
            o1 = Buf(); o2 = Buf();
            launch(3, 4, [&] { aggregate(s, 3, 0, o1.d, dt, op, n); });
            launch(2, 3, [&] { aggregate_vec(s, 3, 0, o2.d, dt, op, n); });
            expect(o1, dt, want, n, op == AGG_MAX ? "aggregate max" : "aggregate min");
            expect(o2, dt, want, n, op == AGG_MAX ? "aggregate_vec max" : "aggregate_vec min");
            Sources acc{}; acc.p[0] = bx.d; acc.p[1] = bz.d;
            o1 = by; o2 = by;
            launch(3, 4, [&] { aggregate(acc, 2, 1, o1.d, dt, op, n); });
            launch(2, 3, [&] { aggregate_vec(acc, 2, 1, o2.d, dt, op, n); });
            expect(o1, dt, want_acc, n, "aggregate accumulating");
            expect(o2, dt, want_acc, n, "aggregate_vec accumulating");
        }
        // Max over the 5 columns of a 4 x 5 block: a NaN anywhere in a row, first or last,
        // is its maximum; +inf; a row of -inf only is -inf.
        const float r[20] = {1, 2, NaN, 4, 5, NaN, -1, -2, -3, -4, 1, Inf, 3, -Inf, 2, -Inf, -Inf, -Inf, -Inf, -Inf};
        const float rmax[4] = {NaN, NaN, Inf, -Inf};
        Buf br = of(dt, r, 20);
        Dims keep{}, over{};
        keep.rank = 1; keep.shape[0] = 4; keep.s0[0] = 5; keep.s1[0] = 1;
        over.rank = 1; over.shape[0] = 5; over.s0[0] = 1;
        for (int k = 1; k < 8; ++k) keep.shape[k] = over.shape[k] = 1;
        o1 = Buf(); o2 = Buf();
        launch(3, 4, [&] { reduce(br.d, o1.d, dt, REDUCE_MAX, keep, over, 1.0); });
        launch(2, 5, [&] { reduce32(br.d, o2.d, dt, REDUCE_MAX, keep, over, 1.0); });
        expect(o1, dt, rmax, 4, "reduce max");
        expect(o2, dt, rmax, 4, "reduce32 max");
        // The mean of the same rows (over a whole count of 10, as a block of a split row):
        // NaN where the row holds one, +inf and -inf together NaN, -inf alone -inf.
        const float rmean[4] = {NaN, NaN, NaN, -Inf};
        launch(3, 4, [&] { reduce(br.d, o1.d, dt, REDUCE_MEAN, keep, over, 10.0); });
        launch(2, 5, [&] { reduce32(br.d, o2.d, dt, REDUCE_MEAN, keep, over, 10.0); });
        expect(o1, dt, rmean, 4, "reduce mean");
        expect(o2, dt, rmean, 4, "reduce32 mean");
    }
    printf("fails: %d\n", fails);
    return fails != 0;
}
