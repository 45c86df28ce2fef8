// The post-norm sub-layer connection's forward on the GPU (§3.1, §5.4); spec: reference.py.
//
// v1: one warp per row held in registers (VPT values per lane, 32 * VPT >= D): the bias, dropout
//     and residual add on the way in, z written once, then LayerNorm's two statistics by warp sums
//
//   z = x + Dropout_p(s + bias)   (rounded once to T: what the backward normalises again)
//   y = (z - mean) * rstd * gamma + beta
//
// One kernel instead of four (the bias fill the product read back, dropout, add, LayerNorm): it
// reads x and s once and writes z and y. The dropout draws are u[i] when a u array is passed (the
// contract's form, tested against the reference) or, in training, SplitMix64 of (seed, index)
// made inline, the numbers of CupyBackend.uniform; a time-major (T, B, D) array draws the numbers
// of its (B, T, D) transpose (logical_row, common.cuh), as dropout_forward_v1_seeded_time_major.
// Shapes: x, s, y, z (rows, D) C-contiguous; bias (D,) in T; gamma, beta, mean, rstd in Acc<T>.
// Templates over T (float, f16, double, bf16) and VPT, instantiated by name from cupy_launch.py.
// Standalone syntax check:
//   nvcc -std=c++17 -arch=sm_90 -I.. -c cuda.cu -o /dev/null   (in this folder; -I.. finds common.cuh)

#include "common.cuh"

template <typename T, int VPT>
__global__ void dropout_add_layernorm_forward_v1(
    T* __restrict__ y, T* __restrict__ z, typename Acc<T>::type* __restrict__ mean,
    typename Acc<T>::type* __restrict__ rstd, const T* __restrict__ x, const T* __restrict__ s,
    const T* __restrict__ bias, int has_bias, const typename Acc<T>::type* __restrict__ gamma,
    const typename Acc<T>::type* __restrict__ beta, typename Acc<T>::type eps, const float* __restrict__ u,
    int has_u, unsigned long long seed, double p_u, typename Acc<T>::type keep_scale, int drop, long long rows,
    int D, long long positions, long long batch) {
    typedef typename Acc<T>::type A;
    const int lane = threadIdx.x & 31;
    const long long r = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;
    const long long base = r * D, drawn = logical_row(r, positions, batch) * D;
    A v[VPT];
    A sum = 0;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {  // VPT independent loads in flight per lane
        const int j = lane + 32 * i;
        v[i] = A(0);
        if (j < D) {
            A d = load(s[base + j]);
            if (has_bias) d += load(bias[j]);
            if (drop) {
                const double draw = has_u ? to_f64(u[base + j]) : to_f64(splitmix_uniform(seed, drawn + j));
                d = draw >= p_u ? d * keep_scale : A(0);
            }
            T rounded;
            store(rounded, load(x[base + j]) + d);
            z[base + j] = rounded;
            v[i] = load(rounded);  // normalise z as it is stored
        }
        sum += v[i];
    }
    const A mu = warp_sum(sum) / D;
    A sq = 0;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int j = lane + 32 * i;
        const A c = j < D ? v[i] - mu : A(0);  // padding lanes must not add mu^2
        sq += c * c;
    }
    const A rs = rsqrt_(warp_sum(sq) / D + eps);
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int j = lane + 32 * i;
        if (j < D) store(y[base + j], (v[i] - mu) * rs * gamma[j] + beta[j]);
    }
    if (lane == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
}
