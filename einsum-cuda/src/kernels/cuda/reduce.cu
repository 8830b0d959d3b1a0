// Reductions: y[i] = ⊕ over the `over` iteration space of x. `keep` iterates the output
// (keep.s0: strides in x, keep.s1: strides in y), `over` the reduced indices (over.s0:
// strides in x). op: a REDUCE_* code of einsum_ops::reduce::ReduceOp (generated,
// kernels/codes.rs): REDUCE_SUM (accumulated in f64, as the CPU reference), REDUCE_MAX
// (NaN where an element is NaN, as NumPy's max: nan_max keeps a NaN once it is in) or
// REDUCE_MEAN (the f64 sum divided by `count`, the whole tensor's number of reduced elements,
// not the block's: a split reduced index's partial means then add up to the mean).
// One body, instantiated with 64-bit (`reduce`) and 32-bit (`reduce32`, chosen by the host
// where the offsets fit, einsum-cuda/src/addressing.rs) index arithmetic.
template <typename I>
__device__ __forceinline__ void reduce_body(const void* x, void* y, int dt, int op, const Dims& keep,
                                            const Dims& over, double count) {
    I n = (I)volume(keep), m = (I)volume(over);
    GRID_STRIDE_T(I, i, n) {
        I bx, by, unused;
        offsets<I>(keep, i, &bx, &by, &unused);
        double sum = 0.0;
        float mx = NEG_INF;
        for (I j = 0; j < m; ++j) {
            I ox, u1, u2;
            offsets<I>(over, j, &ox, &u1, &u2);
            float v = ld(x, bx + ox, dt);
            sum += (double)v;
            mx = nan_max(mx, v);
        }
        float r;
        switch (op) {
            case REDUCE_SUM: r = (float)sum; break;
            case REDUCE_MAX: r = mx; break;
            case REDUCE_MEAN: r = (float)(sum / count); break;
            default: r = __int_as_float(0x7fc00000); break;  // not a code: NaN
        }
        st(y, by, dt, r);
    }
}

extern "C" __global__ void reduce(const void* x, void* y, int dt, int op, Dims keep, Dims over, double count) {
    reduce_body<i64>(x, y, dt, op, keep, over, count);
}

extern "C" __global__ void reduce32(const void* x, void* y, int dt, int op, Dims keep, Dims over, double count) {
    reduce_body<u32>(x, y, dt, op, keep, over, count);
}
