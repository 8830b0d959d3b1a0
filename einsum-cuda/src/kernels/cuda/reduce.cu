// Reductions: y[i] = ⊕ over the `over` iteration space of x. `keep` iterates the output
// (keep.s0: strides in x, keep.s1: strides in y), `over` the reduced indices (over.s0:
// strides in x). op: 0 sum (accumulated in f64, as the CPU reference), 1 max.
extern "C" __global__ void reduce(const void* x, void* y, int dt, int op, Dims keep, Dims over) {
    i64 n = volume(keep), m = volume(over);
    GRID_STRIDE(i, n) {
        i64 bx, by, unused;
        offsets(keep, i, &bx, &by, &unused);
        double sum = 0.0;
        float mx = NEG_INF;
        for (i64 j = 0; j < m; ++j) {
            i64 ox, u1, u2;
            offsets(over, j, &ox, &u1, &u2);
            float v = ld(x, bx + ox, dt);
            sum += (double)v;
            mx = fmaxf(mx, v);
        }
        st(y, by, dt, op == 0 ? (float)sum : mx);
    }
}
