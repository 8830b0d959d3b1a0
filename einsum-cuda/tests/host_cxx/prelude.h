// Host stand-ins for the CUDA built-ins the memory-bound kernels use (tests/host_cxx.rs).
#include <cstdint>
#include <cstring>
#include <cmath>
#define __global__
#define __device__
#define __forceinline__ inline
struct uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
struct dim3s { unsigned x, y, z; };
extern dim3s blockIdx, blockDim, threadIdx, gridDim;
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
inline float host_h2f(unsigned short h) { _Float16 x; memcpy(&x, &h, 2); return (float)x; }
inline unsigned short host_f2h(float v) { _Float16 x = (_Float16)v; unsigned short h; memcpy(&h, &x, 2); return h; }
