// Inverted dropout on the GPU (§5.4 "Residual Dropout"); spec: reference.py.
//
// v1: one thread per element: y = x * 1/(1-p) where u >= p, else 0; v1_seeded draws u inline
//
// The random draws u come in as an array (the caller's RNG), so forward and backward are the
// same call with the same u. p_u is p rounded to u's dtype (NumPy compares u >= p in u's
// dtype), compared in double (widened by to_f64: exact under -ftz) so no draw flips.
// Bytes per element: read x and u, write y.
// dropout_forward_v1_seeded makes u itself from (seed, element index) with the SplitMix64 of
// CupyBackend.uniform, the same draws bit for bit, so no u array is written or read (one
// kernel instead of two, and 8 fewer bytes an element); CupyBackend.dropout launches it, and
// dropout_forward_v1_seeded_time_major for time-major activations (the draws of their transpose).
// Templates over the element type T and the draws' type U (float, f16, double), instantiated
// by name from cupy_launch.py. Standalone syntax check:
//   nvcc -std=c++17 -arch=sm_90 -I.. -c cuda.cu -o /dev/null   (in this folder; -I.. finds common.cuh)

#include "common.cuh"

template <typename T, typename U>
__global__ void dropout_forward_v1(T* __restrict__ y, const T* __restrict__ x, const U* __restrict__ u,
                                   double p_u, typename Acc<T>::type keep_scale,
                                   long long n) {
    typedef typename Acc<T>::type A;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    store(y[i], to_f64(load(u[i])) >= p_u ? load(x[i]) * keep_scale : A(0));
}

// The rows of a time-major (T, B, W) x, W = the trailing axes: element (t, b, w) draws the number of
// element (b, t, w) of its (B, T, W) transpose, so a mask does not depend on the layout. Rows run
// down a 2-d grid, so the row's place in the transpose is found once per row, not per element.
template <typename T>
__global__ void dropout_forward_v1_seeded_time_major(T* __restrict__ y, const T* __restrict__ x,
                                                     unsigned long long seed, double p_u,
                                                     typename Acc<T>::type keep_scale, long long positions,
                                                     long long batch, int W) {
    typedef typename Acc<T>::type A;
    for (long long r = blockIdx.y; r < positions * batch; r += gridDim.y) {  // r = t * batch + b
        const long long logical = logical_row(r, positions, batch) * W;  // the row's first element in (B, T, W) order
        for (int w = blockIdx.x * blockDim.x + threadIdx.x; w < W; w += gridDim.x * blockDim.x) {
            const long long i = r * W + w;
            store(y[i], to_f64(splitmix_uniform(seed, logical + w)) >= p_u ? load(x[i]) * keep_scale : A(0));
        }
    }
}

template <typename T>
__global__ void dropout_forward_v1_seeded(T* __restrict__ y, const T* __restrict__ x, unsigned long long seed,
                                          double p_u, typename Acc<T>::type keep_scale, long long n) {
    typedef typename Acc<T>::type A;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    store(y[i], to_f64(splitmix_uniform(seed, i)) >= p_u ? load(x[i]) * keep_scale : A(0));
}
