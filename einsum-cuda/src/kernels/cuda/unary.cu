// y = f(x) elementwise, for the operations of einsum_ops::unary::UnaryOp: `op` is a UNARY_*
// code and `unary_apply` its switch, both generated from the Rust enum (kernels/codes.rs);
// `s` is the factor of UNARY_SCALE.
extern "C" __global__ void unary(const void* x, void* y, int dt, int op, float s, i64 n) {
    GRID_STRIDE(i, n) {
        st(y, i, dt, unary_apply(op, ld(x, i, dt), s));
    }
}
