// LayerNorm backward on the GPU; spec: reference.py.
//
// v1: naive port of the reference: dx one thread per row; dgamma, dbeta one thread per column
// v2: fused: one warp per row (registers) writes dx and adds dy*xhat, dy into per-lane column
//     sums; warps of a block combine them in shared memory in a fixed order (deterministic),
//     each block writes one partial row, and _params sums the partials per column
//
// Math, with xhat = (x - mean) * rstd and g = dy * gamma (term by term):
//   dx = rstd * (g                       term 1: through xhat directly
//               - mean(g)                term 2: through the mean
//               - xhat * mean(g * xhat)) term 3: through rstd
//   dgamma = sum_rows(dy * xhat), dbeta = sum_rows(dy)
// Shapes: D = d_model, rows = prod(x.shape[:-1]); gamma, mean, rstd and the outputs dgamma,
// dbeta are Acc<T> (float32 or float64). Templates over T (float, f16, double), instantiated
// by name from cupy_launch.py. Standalone syntax check:
//   nvcc -std=c++17 -arch=sm_90 -I.. -c cuda.cu -o /dev/null   (in this folder; -I.. finds common.cuh)

#include "common.cuh"

template <typename T>
__global__ void layernorm_backward_v1(T* __restrict__ dx, const T* __restrict__ dy,
                                      const T* __restrict__ x,
                                      const typename Acc<T>::type* __restrict__ gamma,
                                      const typename Acc<T>::type* __restrict__ mean,
                                      const typename Acc<T>::type* __restrict__ rstd,
                                      long long rows, int D) {
    typedef typename Acc<T>::type A;
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const long long base = r * D;
    const A mu = mean[r], rs = rstd[r];
    A mean_g = 0, mean_gx = 0;
    for (int j = 0; j < D; ++j) {
        const A g = load(dy[base + j]) * gamma[j];
        mean_g += g;
        mean_gx += g * (load(x[base + j]) - mu) * rs;
    }
    mean_g /= D;
    mean_gx /= D;
    for (int j = 0; j < D; ++j) {
        const A xhat = (load(x[base + j]) - mu) * rs;
        store(dx[base + j], rs * (load(dy[base + j]) * gamma[j] - mean_g - xhat * mean_gx));
    }
}

template <typename T>
__global__ void layernorm_backward_v1_params(typename Acc<T>::type* __restrict__ dgamma,
                                             typename Acc<T>::type* __restrict__ dbeta,
                                             const T* __restrict__ dy, const T* __restrict__ x,
                                             const typename Acc<T>::type* __restrict__ mean,
                                             const typename Acc<T>::type* __restrict__ rstd,
                                             long long rows, int D) {
    typedef typename Acc<T>::type A;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;  // one thread per column
    if (j >= D) return;
    A sum_gamma = 0, sum_beta = 0;
    for (long long r = 0; r < rows; ++r) {
        const A d = load(dy[r * D + j]);
        sum_gamma += d * (load(x[r * D + j]) - mean[r]) * rstd[r];
        sum_beta += d;
    }
    dgamma[j] = sum_gamma;
    dbeta[j] = sum_beta;
}

// VPT = values per lane (compile time, registers); needs D <= 32 * VPT. Dynamic shared
// memory: 2 * D * sizeof(A). partial: (gridDim.x, 2, D) block sums of dy*xhat and dy.
template <typename T, int VPT>
__global__ void layernorm_backward_v2(T* __restrict__ dx, typename Acc<T>::type* __restrict__ partial,
                                      const T* __restrict__ dy, const T* __restrict__ x,
                                      const typename Acc<T>::type* __restrict__ gamma,
                                      const typename Acc<T>::type* __restrict__ mean,
                                      const typename Acc<T>::type* __restrict__ rstd,
                                      long long rows, int D) {
    typedef typename Acc<T>::type A;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    A* block_dgamma = reinterpret_cast<A*>(smem_raw);  // (D,)
    A* block_dbeta = block_dgamma + D;                  // (D,)
    for (int j = threadIdx.x; j < 2 * D; j += blockDim.x) block_dgamma[j] = 0;
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    A gam[VPT], lane_dgamma[VPT], lane_dbeta[VPT];
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int j = lane + 32 * i;
        gam[i] = j < D ? gamma[j] : A(0);  // padding columns contribute 0 everywhere
        lane_dgamma[i] = 0;
        lane_dbeta[i] = 0;
    }
    // grid-stride over rows, one warp per row
    for (long long r = (long long)blockIdx.x * warps + warp; r < rows; r += (long long)gridDim.x * warps) {
        const A mu = mean[r], rs = rstd[r];
        A xhat[VPT], d[VPT];
        A mean_g = 0, mean_gx = 0;
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const int j = lane + 32 * i;
            xhat[i] = j < D ? (load(x[r * D + j]) - mu) * rs : A(0);
            d[i] = j < D ? load(dy[r * D + j]) : A(0);
            const A g = d[i] * gam[i];
            mean_g += g;
            mean_gx += g * xhat[i];
            lane_dgamma[i] += d[i] * xhat[i];
            lane_dbeta[i] += d[i];
        }
        mean_g = warp_sum(mean_g) / D;
        mean_gx = warp_sum(mean_gx) / D;
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const int j = lane + 32 * i;
            if (j < D) store(dx[r * D + j], rs * (d[i] * gam[i] - mean_g - xhat[i] * mean_gx));
        }
    }
    // warps add their column sums one after another: a fixed order, so bitwise reproducible
    for (int w = 0; w < warps; ++w) {
        if (warp == w) {
#pragma unroll
            for (int i = 0; i < VPT; ++i) {
                const int j = lane + 32 * i;
                if (j < D) {
                    block_dgamma[j] += lane_dgamma[i];
                    block_dbeta[j] += lane_dbeta[i];
                }
            }
        }
        __syncthreads();
    }
    A* out = partial + (long long)blockIdx.x * 2 * D;
    for (int j = threadIdx.x; j < 2 * D; j += blockDim.x) out[j] = block_dgamma[j];
}

template <typename T>
__global__ void layernorm_backward_v2_params(typename Acc<T>::type* __restrict__ dgamma,
                                             typename Acc<T>::type* __restrict__ dbeta,
                                             const typename Acc<T>::type* __restrict__ partial,
                                             int blocks, int D) {
    typedef typename Acc<T>::type A;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;  // one thread per column
    if (j >= D) return;
    A sum_gamma = 0, sum_beta = 0;
    for (int b = 0; b < blocks; ++b) {
        sum_gamma += partial[(2LL * b) * D + j];
        sum_beta += partial[(2LL * b + 1) * D + j];
    }
    dgamma[j] = sum_gamma;
    dbeta[j] = sum_beta;
}
