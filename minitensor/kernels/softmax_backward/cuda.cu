// Softmax backward on the GPU; spec: reference.py.
//
// v1: naive port of the reference: one thread per row, two passes (dot, write)
// v2: one warp per row: dot = sum(dy*y) reduced with shuffles, then a write pass
// v3: one warp per row with y and dy held in registers: each read once, dx written once
//
// Math: dx = scale * y * (dy - sum(dy * y)) over the last axis (blocked entries have y = 0).
// Shapes: L = keys per row; rows = prod(y.shape[:-1]).
// Templates over the element type T (float, f16, double), instantiated by name from
// cupy_launch.py. Standalone syntax check:
//   nvcc -std=c++17 -arch=sm_90 -I.. -c cuda.cu -o /dev/null   (in this folder; -I.. finds common.cuh)

#include "common.cuh"

template <typename T>
__global__ void softmax_backward_v1(T* __restrict__ dx, const T* __restrict__ y,
                                    const T* __restrict__ dy, typename Acc<T>::type scale,
                                    long long rows, int L) {
    typedef typename Acc<T>::type A;
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const long long base = r * L;
    A dot = 0;
    for (int j = 0; j < L; ++j) dot += load(dy[base + j]) * load(y[base + j]);
    for (int j = 0; j < L; ++j)
        store(dx[base + j], scale * load(y[base + j]) * (load(dy[base + j]) - dot));
}

template <typename T>
__global__ void softmax_backward_v2(T* __restrict__ dx, const T* __restrict__ y,
                                    const T* __restrict__ dy, typename Acc<T>::type scale,
                                    long long rows, int L) {
    typedef typename Acc<T>::type A;
    const int lane = threadIdx.x & 31;
    const long long r = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;  // warp-uniform: the shuffles stay full-warp
    const long long base = r * L;
    A dot = 0;
    for (int j = lane; j < L; j += 32) dot += load(dy[base + j]) * load(y[base + j]);
    for (int offset = 16; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    for (int j = lane; j < L; j += 32)
        store(dx[base + j], scale * load(y[base + j]) * (load(dy[base + j]) - dot));
}

// VPT = values per lane (compile time, so the arrays stay in registers); needs L <= 32 * VPT.
template <typename T, int VPT>
__global__ void softmax_backward_v3(T* __restrict__ dx, const T* __restrict__ y,
                                    const T* __restrict__ dy, typename Acc<T>::type scale,
                                    long long rows, int L) {
    typedef typename Acc<T>::type A;
    const int lane = threadIdx.x & 31;
    const long long r = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;
    const long long base = r * L;
    A yv[VPT], dyv[VPT];
    A dot = 0;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int j = lane + 32 * i;
        yv[i] = j < L ? load(y[base + j]) : A(0);
        dyv[i] = j < L ? load(dy[base + j]) : A(0);
        dot += yv[i] * dyv[i];
    }
    for (int offset = 16; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int j = lane + 32 * i;
        if (j < L) store(dx[base + j], scale * yv[i] * (dyv[i] - dot));
    }
}
