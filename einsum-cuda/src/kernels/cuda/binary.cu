// y = a op b with named broadcasting: d.shape is y's block, d.s0 / d.s1 the strides of a / b
// along y's dimensions (0 where the operand lacks the index), d.s2 y's own strides. `op` is
// a BINARY_* code of einsum_ops::binary::BinaryOp, applied by the generated `binary_apply`
// (kernels/codes.rs).
extern "C" __global__ void binary(const void* a, const void* b, void* y, int dt, int op, Dims d) {
    i64 n = volume(d);
    GRID_STRIDE(i, n) {
        i64 oa, ob, oy;
        offsets(d, i, &oa, &ob, &oy);
        st(y, oy, dt, binary_apply(op, ld(a, oa, dt), ld(b, ob, dt)));
    }
}
