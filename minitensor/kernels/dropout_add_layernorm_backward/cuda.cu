// The post-norm sub-layer connection's backward on the GPU (§3.1, §5.4); spec: reference.py.
//
// v1: one warp per row held in registers (VPT values per lane): dy (+ dy2) read once, dz term by
//     term (as layernorm_backward), dx = dz and ds = Dropout(dz) written, and each lane's
//     column sums of dy*zhat, dy and ds; the warps of a block add theirs in shared memory in a
//     fixed order and write one partial row; _params sums the partial rows per column
//
// Math, with zhat = (z - mean) * rstd and g = dy * gamma (term by term):
//   dz = rstd * (g                        term 1: through zhat directly
//               - mean(g)                 term 2: through the mean
//               - zhat * mean(g * zhat))  term 3: through rstd
//   dx = dz (the residual), ds = Dropout_p(dz) (the sub-layer), dbias = sum_rows ds,
//   dgamma = sum_rows dy * zhat, dbeta = sum_rows dy
// dy2: the gradient of y's other consumer (the next sub-layer and the residual stream both read
// y), added on load instead of by a kernel of its own. One row kernel instead of the dropout and
// LayerNorm's two; the column sums stay a second, small kernel, so they are summed in a fixed
// order (one kernel would need atomics, and a different sum on every run).
// Shapes: dy, dy2, z, dx, ds (rows, D) C-contiguous; gamma, mean, rstd, the sums in Acc<T>;
// partial (blocks, 3, D). Templates over T (float, f16, double, bf16) and VPT, instantiated by
// name from cupy_launch.py. Standalone syntax check:
//   nvcc -std=c++17 -arch=sm_90 -I.. -c cuda.cu -o /dev/null   (in this folder; -I.. finds common.cuh)

#include "common.cuh"

// Dynamic shared memory: 3 * D * sizeof(A).
template <typename T, int VPT>
__global__ void dropout_add_layernorm_backward_v1(
    T* __restrict__ dx, T* __restrict__ ds, typename Acc<T>::type* __restrict__ partial,
    const T* __restrict__ dy, const T* __restrict__ dy2, int two, const T* __restrict__ z,
    const typename Acc<T>::type* __restrict__ gamma, const typename Acc<T>::type* __restrict__ mean,
    const typename Acc<T>::type* __restrict__ rstd, const float* __restrict__ u, int has_u,
    unsigned long long seed, double p_u, typename Acc<T>::type keep_scale, int drop, long long rows, int D,
    long long positions, long long batch) {
    typedef typename Acc<T>::type A;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    A* block_sums = reinterpret_cast<A*>(smem_raw);  // (3, D): dgamma, dbeta, dbias
    for (int j = threadIdx.x; j < 3 * D; j += blockDim.x) block_sums[j] = 0;
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    A gam[VPT], lane_dgamma[VPT], lane_dbeta[VPT], lane_dbias[VPT];
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int j = lane + 32 * i;
        gam[i] = j < D ? gamma[j] : A(0);  // padding columns contribute 0 everywhere
        lane_dgamma[i] = lane_dbeta[i] = lane_dbias[i] = 0;
    }
    // grid-stride over rows, one warp per row
    for (long long r = (long long)blockIdx.x * warps + warp; r < rows; r += (long long)gridDim.x * warps) {
        const long long base = r * D, drawn = logical_row(r, positions, batch) * D;
        const A mu = mean[r], rs = rstd[r];
        A zhat[VPT], d[VPT];
        A mean_g = 0, mean_gz = 0;
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const int j = lane + 32 * i;
            zhat[i] = j < D ? (load(z[base + j]) - mu) * rs : A(0);
            d[i] = j < D ? load(dy[base + j]) + (two ? load(dy2[base + j]) : A(0)) : A(0);
            const A g = d[i] * gam[i];
            mean_g += g;
            mean_gz += g * zhat[i];
            lane_dgamma[i] += d[i] * zhat[i];
            lane_dbeta[i] += d[i];
        }
        mean_g = warp_sum(mean_g) / D;
        mean_gz = warp_sum(mean_gz) / D;
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const int j = lane + 32 * i;
            if (j < D) {
                T rounded;
                store(rounded, rs * (d[i] * gam[i] - mean_g - zhat[i] * mean_gz));
                dx[base + j] = rounded;
                A dsv = load(rounded);  // the mask on the rounded dz
                if (drop) {
                    const double draw = has_u ? to_f64(u[base + j]) : to_f64(splitmix_uniform(seed, drawn + j));
                    store(rounded, draw >= p_u ? dsv * keep_scale : A(0));
                    ds[base + j] = rounded;
                    dsv = load(rounded);
                }
                lane_dbias[i] += dsv;
            }
        }
    }
    // warps add their column sums one after another: a fixed order, so bitwise reproducible
    for (int w = 0; w < warps; ++w) {
        if (warp == w) {
#pragma unroll
            for (int i = 0; i < VPT; ++i) {
                const int j = lane + 32 * i;
                if (j < D) {
                    block_sums[j] += lane_dgamma[i];
                    block_sums[D + j] += lane_dbeta[i];
                    block_sums[2 * D + j] += lane_dbias[i];
                }
            }
        }
        __syncthreads();
    }
    A* out = partial + (long long)blockIdx.x * 3 * D;
    for (int j = threadIdx.x; j < 3 * D; j += blockDim.x) out[j] = block_sums[j];
}

template <typename T>
__global__ void dropout_add_layernorm_backward_v1_params(typename Acc<T>::type* __restrict__ sums,
                                                         const typename Acc<T>::type* __restrict__ partial,
                                                         int blocks, int D) {
    typedef typename Acc<T>::type A;
    const int k = blockIdx.x * blockDim.x + threadIdx.x;  // one thread per (quantity, column): 3 * D
    if (k >= 3 * D) return;
    A total = 0;
    for (int b = 0; b < blocks; ++b) total += partial[(long long)b * 3 * D + k];
    sums[k] = total;
}
