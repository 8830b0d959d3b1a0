// Rotary embeddings on a block. d.shape is the block's shape with the feature axis cut to
// half its extent, d.s0 the block's strides; `seq` and `feat` are the sequence and feature
// axes; `table` holds cos then sin, f32 [rows, half] each, for the block's absolute
// positions within their packed sequences (computed on the host in f64).
extern "C" __global__ void rope(const void* x, void* y, int dt, const float* table, int seq, int feat, i64 half,
                                i64 rows, Dims d) {
    i64 n = volume(d);
    GRID_STRIDE(i, n) {
        i64 rem = i, a = 0, row = 0, k = 0;
        for (int q = d.rank - 1; q >= 0; --q) {
            i64 e = rem % d.shape[q];
            rem /= d.shape[q];
            a += e * d.s0[q];
            if (q == seq) row = e;
            if (q == feat) k = e;
        }
        i64 b = a + half * d.s0[feat];
        float c = table[row * half + k], s = table[rows * half + row * half + k];
        float va = ld(x, a, dt), vb = ld(x, b, dt);
        st(y, a, dt, va * c - vb * s);
        st(y, b, dt, vb * c + va * s);
    }
}
