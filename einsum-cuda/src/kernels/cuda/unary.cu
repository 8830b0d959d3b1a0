// y = f(x) elementwise, the operations of einsum_ops::unary::UnaryOp:
// 0 relu, 1 gelu (tanh form), 2 silu, 3 exp, 4 neg, 5 scale by s.
extern "C" __global__ void unary(const void* x, void* y, int dt, int op, float s, i64 n) {
    GRID_STRIDE(i, n) {
        float v = ld(x, i, dt), r;
        switch (op) {
            case 0: r = fmaxf(v, 0.0f); break;
            case 1: r = 0.5f * v * (1.0f + tanhf(0.7978846f * (v + 0.044715f * v * v * v))); break;
            case 2: r = v / (1.0f + expf(-v)); break;
            case 3: r = expf(v); break;
            case 4: r = -v; break;
            default: r = s * v; break;
        }
        st(y, i, dt, r);
    }
}
