// LayerNorm forward on the GPU (§3.1 "LayerNorm(x + Sublayer(x))"); spec: reference.py.
//
// v1: naive port of the reference: one thread per row, two passes (mean, variance) + write
// v2: one warp per row: mean, then variance of (x - mean), then write, shuffles for the sums
// v3: one warp per row held in registers: x read once, exact two-pass variance from registers
//
// Math: mean, rstd = 1/sqrt(var + eps) (biased variance); y = (x - mean) * rstd * gamma + beta.
// Shapes: D = d_model, rows = prod(x.shape[:-1]); mean, rstd (rows,) in Acc<T> (float32 or
// float64); gamma, beta arrive in Acc<T> (the launcher casts the D-sized vectors).
// Templates over the element type T (float, f16, double), instantiated by name from
// cupy_launch.py. Standalone syntax check:
//   nvcc -std=c++17 -arch=sm_90 -I.. -c cuda.cu -o /dev/null   (in this folder; -I.. finds common.cuh)

#include "common.cuh"

template <typename T>
__global__ void layernorm_forward_v1(T* __restrict__ y, typename Acc<T>::type* __restrict__ mean,
                                     typename Acc<T>::type* __restrict__ rstd,
                                     const T* __restrict__ x,
                                     const typename Acc<T>::type* __restrict__ gamma,
                                     const typename Acc<T>::type* __restrict__ beta,
                                     typename Acc<T>::type eps, long long rows, int D) {
    typedef typename Acc<T>::type A;
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const T* xr = x + r * D;
    T* yr = y + r * D;
    A sum = 0;
    for (int j = 0; j < D; ++j) sum += load(xr[j]);
    const A mu = sum / D;
    A sq = 0;
    for (int j = 0; j < D; ++j) {
        const A c = load(xr[j]) - mu;
        sq += c * c;
    }
    const A rs = rsqrt_(sq / D + eps);
    for (int j = 0; j < D; ++j) store(yr[j], (load(xr[j]) - mu) * rs * gamma[j] + beta[j]);
    mean[r] = mu;
    rstd[r] = rs;
}

template <typename T>
__global__ void layernorm_forward_v2(T* __restrict__ y, typename Acc<T>::type* __restrict__ mean,
                                     typename Acc<T>::type* __restrict__ rstd,
                                     const T* __restrict__ x,
                                     const typename Acc<T>::type* __restrict__ gamma,
                                     const typename Acc<T>::type* __restrict__ beta,
                                     typename Acc<T>::type eps, long long rows, int D) {
    typedef typename Acc<T>::type A;
    const int lane = threadIdx.x & 31;
    const long long r = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;  // warp-uniform: the shuffles stay full-warp
    const T* xr = x + r * D;
    T* yr = y + r * D;
    A sum = 0;
    for (int j = lane; j < D; j += 32) sum += load(xr[j]);
    const A mu = warp_sum(sum) / D;
    A sq = 0;
    for (int j = lane; j < D; j += 32) {
        const A c = load(xr[j]) - mu;
        sq += c * c;
    }
    const A rs = rsqrt_(warp_sum(sq) / D + eps);
    for (int j = lane; j < D; j += 32) store(yr[j], (load(xr[j]) - mu) * rs * gamma[j] + beta[j]);
    if (lane == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
}

// VPT = values per lane (compile time, so v[] stays in registers); needs D <= 32 * VPT.
template <typename T, int VPT>
__global__ void layernorm_forward_v3(T* __restrict__ y, typename Acc<T>::type* __restrict__ mean,
                                     typename Acc<T>::type* __restrict__ rstd,
                                     const T* __restrict__ x,
                                     const typename Acc<T>::type* __restrict__ gamma,
                                     const typename Acc<T>::type* __restrict__ beta,
                                     typename Acc<T>::type eps, long long rows, int D) {
    typedef typename Acc<T>::type A;
    const int lane = threadIdx.x & 31;
    const long long r = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;
    const T* xr = x + r * D;
    T* yr = y + r * D;
    A v[VPT];
    A sum = 0;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {  // VPT independent loads in flight per lane
        const int j = lane + 32 * i;
        v[i] = j < D ? load(xr[j]) : A(0);
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
        if (j < D) store(yr[j], (v[i] - mu) * rs * gamma[j] + beta[j]);
    }
    if (lane == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
}
