// The host drivers' view of the memory-bound kernels (tests/host_cxx.rs): the CUDA built-in
// variables, the kernels' argument structs and entry points, and a launch that runs a grid's
// threads one after another. Included by main.cpp and nonfinite.cpp after prelude.h.
#pragma once
dim3s blockIdx, blockDim, threadIdx, gridDim;
typedef long long i64;
#define MAX_RANK 8
struct Dims { int rank; int pad; i64 shape[MAX_RANK]; i64 s0[MAX_RANK]; i64 s1[MAX_RANK]; i64 s2[MAX_RANK]; };
struct Sources { const void* p[8]; };
extern "C" {
void box_copy(const void*, i64, void*, i64, int, Dims);
void box_copy32(const void*, i64, void*, i64, int, Dims);
void copy_vec(const void*, void*, i64);
void unary(const void*, void*, int, int, float, i64);
void unary_vec(const void*, void*, int, int, float, i64);
void binary(const void*, const void*, void*, int, int, Dims);
void binary32(const void*, const void*, void*, int, int, Dims);
void binary_vec(const void*, const void*, void*, int, int, i64);
void aggregate(Sources, int, int, void*, int, int, i64);
void aggregate_vec(Sources, int, int, void*, int, int, i64);
void unary_binary(const void*, const void*, void*, int, int, float, int, int, i64);
void unary_binary_vec(const void*, const void*, void*, int, int, float, int, int, i64);
void reduce(const void*, void*, int, int, Dims, Dims, double);
void reduce32(const void*, void*, int, int, Dims, Dims, double);
}
template <typename F> void launch(unsigned G, unsigned B, F f) {
    gridDim = {G, 1, 1}; blockDim = {B, 1, 1};
    for (unsigned b = 0; b < G; ++b) for (unsigned t = 0; t < B; ++t) { blockIdx = {b, 0, 0}; threadIdx = {t, 0, 0}; f(); }
}
