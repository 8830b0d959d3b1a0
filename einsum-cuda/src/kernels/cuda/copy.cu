// Strided box copy: slices, stitches, loads and stores of blocks with absolute coordinates,
// and the permutations of a contraction. Element i of d.shape goes from src[base_src +
// offset s0] to dst[base_dst + offset s1]; both in dtype dt (DTYPE_F32 moves 4 bytes, the
// 16-bit dtypes 2). One body, instantiated with 64-bit (`box_copy`) and 32-bit
// (`box_copy32`, chosen by the host where every offset fits) index arithmetic.
template <typename I>
__device__ __forceinline__ void box_copy_body(const void* src, i64 base_src, void* dst, i64 base_dst, int dt,
                                              const Dims& d) {
    const i64 es = dt == DTYPE_F32 ? 4 : 2;
    const char* s = (const char*)src + base_src * es;
    char* t = (char*)dst + base_dst * es;
    I n = (I)volume(d);
    GRID_STRIDE_T(I, i, n) {
        I a, b, c;
        offsets<I>(d, i, &a, &b, &c);
        if (dt == DTYPE_F32) {
            ((float*)t)[b] = ((const float*)s)[a];
        } else {
            ((unsigned short*)t)[b] = ((const unsigned short*)s)[a];
        }
    }
}

extern "C" __global__ void box_copy(const void* src, i64 base_src, void* dst, i64 base_dst, int dt, Dims d) {
    box_copy_body<i64>(src, base_src, dst, base_dst, dt, d);
}

extern "C" __global__ void box_copy32(const void* src, i64 base_src, void* dst, i64 base_dst, int dt, Dims d) {
    box_copy_body<u32>(src, base_src, dst, base_dst, dt, d);
}

// A contiguous copy of `bytes` (a multiple of 2) between 16-byte aligned pointers: 16 bytes
// per thread, then the tail of fewer than 16 bytes in 2-byte units.
extern "C" __global__ void copy_vec(const void* src, void* dst, i64 bytes) {
    i64 nv = bytes / 16;
    GRID_STRIDE(i, nv) {
        ((uint4*)dst)[i] = ((const uint4*)src)[i];
    }
    i64 tail = (bytes - nv * 16) / 2;
    GRID_STRIDE(i, tail) {
        ((unsigned short*)dst)[nv * 8 + i] = ((const unsigned short*)src)[nv * 8 + i];
    }
}
