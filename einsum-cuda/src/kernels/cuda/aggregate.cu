// out = a ⊕ b elementwise, for the aggregations of einsum_core::Aggregation:
// 0 sum, 1 max, 2 min, 3 product. `out` may alias `a` (pairwise chains).
extern "C" __global__ void aggregate(const void* a, const void* b, void* out, int dt, int op, i64 n) {
    GRID_STRIDE(i, n) {
        float x = ld(a, i, dt), y = ld(b, i, dt), r;
        switch (op) {
            case 0: r = x + y; break;
            case 1: r = fmaxf(x, y); break;
            case 2: r = fminf(x, y); break;
            default: r = x * y; break;
        }
        st(out, i, dt, r);
    }
}
