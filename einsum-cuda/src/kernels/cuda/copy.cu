// Strided box copy: slices, stitches, loads and stores of blocks with absolute coordinates,
// and the permutations of a contraction. Element i of d.shape goes from src[base_src +
// offset s0] to dst[base_dst + offset s1]; both in dtype dt (DTYPE_F32 moves 4 bytes, the
// 16-bit dtypes 2).
extern "C" __global__ void box_copy(const void* src, i64 base_src, void* dst, i64 base_dst, int dt, Dims d) {
    i64 n = volume(d);
    GRID_STRIDE(i, n) {
        i64 a, b, c;
        offsets(d, i, &a, &b, &c);
        if (dt == DTYPE_F32) {
            ((float*)dst)[base_dst + b] = ((const float*)src)[base_src + a];
        } else {
            ((unsigned short*)dst)[base_dst + b] = ((const unsigned short*)src)[base_src + a];
        }
    }
}
