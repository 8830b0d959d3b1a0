// y = f(x) elementwise, for the operations of einsum_ops::unary::UnaryOp: `op` is a UNARY_*
// code and `unary_apply` its switch, both generated from the Rust enum (kernels/codes.rs);
// `s` is the factor of UNARY_SCALE. `unary` moves one element per step, `unary_vec` (chosen
// by the host where both pointers are 16-byte aligned) 16 bytes, then the scalar tail.

__device__ __forceinline__ void unary_at(const void* x, void* y, int dt, int op, float s, i64 i) {
    st(y, i, dt, unary_apply(op, ld(x, i, dt), s));
}

extern "C" __global__ void unary(const void* x, void* y, int dt, int op, float s, i64 n) {
    GRID_STRIDE(i, n) {
        unary_at(x, y, dt, op, s, i);
    }
}

extern "C" __global__ void unary_vec(const void* x, void* y, int dt, int op, float s, i64 n) {
    const int per = lanes(dt);
    i64 nv = n / per;
    GRID_STRIDE(i, nv) {
        float v[8];
        unpack(((const uint4*)x)[i], dt, v);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            if (k < per) v[k] = unary_apply(op, v[k], s);
        }
        ((uint4*)y)[i] = pack(v, dt);
    }
    GRID_STRIDE(i, n - nv * per) {
        unary_at(x, y, dt, op, s, nv * per + i);
    }
}
