// y = a op b with named broadcasting: d.shape is y's block, d.s0 / d.s1 the strides of a / b
// along y's dimensions (0 where the operand lacks the index), d.s2 y's own strides. `op` is
// a BINARY_* code of einsum_ops::binary::BinaryOp, applied by the generated `binary_apply`
// (kernels/codes.rs). One strided body, instantiated with 64-bit (`binary`) and 32-bit
// (`binary32`) index arithmetic; `binary_vec` is the same-shape contiguous case with 16-byte
// aligned pointers (all chosen by the host, einsum-cuda/src/addressing.rs).
template <typename I>
__device__ __forceinline__ void binary_body(const void* a, const void* b, void* y, int dt, int op, const Dims& d) {
    I n = (I)volume(d);
    GRID_STRIDE_T(I, i, n) {
        I oa, ob, oy;
        offsets<I>(d, i, &oa, &ob, &oy);
        st(y, oy, dt, binary_apply(op, ld(a, oa, dt), ld(b, ob, dt)));
    }
}

extern "C" __global__ void binary(const void* a, const void* b, void* y, int dt, int op, Dims d) {
    binary_body<i64>(a, b, y, dt, op, d);
}

extern "C" __global__ void binary32(const void* a, const void* b, void* y, int dt, int op, Dims d) {
    binary_body<u32>(a, b, y, dt, op, d);
}

extern "C" __global__ void binary_vec(const void* a, const void* b, void* y, int dt, int op, i64 n) {
    const int per = lanes(dt);
    i64 nv = n / per;
    GRID_STRIDE(i, nv) {
        float va[8], vb[8];
        unpack(((const uint4*)a)[i], dt, va);
        unpack(((const uint4*)b)[i], dt, vb);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            if (k < per) va[k] = binary_apply(op, va[k], vb[k]);
        }
        ((uint4*)y)[i] = pack(va, dt);
    }
    GRID_STRIDE(i, n - nv * per) {
        i64 j = nv * per + i;
        st(y, j, dt, binary_apply(op, ld(a, j, dt), ld(b, j, dt)));
    }
}
