// Reductions: y[i] = ⊕ over the `over` iteration space of x. `keep` iterates the output
// (keep.s0: strides in x, keep.s1: strides in y), `over` the reduced indices (over.s0:
// strides in x). op: a REDUCE_* code of einsum_ops::reduce::ReduceOp (generated,
// kernels/codes.rs): REDUCE_SUM (accumulated in f64, as the CPU reference) or REDUCE_MAX.
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
        float r;
        switch (op) {
            case REDUCE_SUM: r = (float)sum; break;
            case REDUCE_MAX: r = mx; break;
            default: r = __int_as_float(0x7fc00000); break;  // not a code: NaN
        }
        st(y, by, dt, r);
    }
}
