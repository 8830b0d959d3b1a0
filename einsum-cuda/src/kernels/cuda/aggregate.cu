// out = a ⊕ b elementwise, for the aggregations of einsum_core::Aggregation: `op` is an
// AGG_* code, applied by the generated `agg_apply` (kernels/codes.rs). `out` may alias `a`
// (pairwise chains).
extern "C" __global__ void aggregate(const void* a, const void* b, void* out, int dt, int op, i64 n) {
    GRID_STRIDE(i, n) {
        st(out, i, dt, agg_apply(op, ld(a, i, dt), ld(b, i, dt)));
    }
}
