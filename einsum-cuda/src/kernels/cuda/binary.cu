// y = a op b with named broadcasting: d.shape is y's block, d.s0 / d.s1 the strides of a / b
// along y's dimensions (0 where the operand lacks the index), d.s2 y's own strides.
// Operations of einsum_ops::binary::BinaryOp: 0 add, 1 sub, 2 mul, 3 div, 4 max.
extern "C" __global__ void binary(const void* a, const void* b, void* y, int dt, int op, Dims d) {
    i64 n = volume(d);
    GRID_STRIDE(i, n) {
        i64 oa, ob, oy;
        offsets(d, i, &oa, &ob, &oy);
        float x = ld(a, oa, dt), z = ld(b, ob, dt), r;
        switch (op) {
            case 0: r = x + z; break;
            case 1: r = x - z; break;
            case 2: r = x * z; break;
            case 3: r = x / z; break;
            default: r = fmaxf(x, z); break;
        }
        st(y, oy, dt, r);
    }
}
