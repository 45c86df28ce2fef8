// Bias + ReLU on the GPU (§3.3, Eq. (2): max(0, xW1 + b1) after the product); spec: reference.py.
//
// v1: one thread per element, grid-stride over the flat array; the column is i % C
// v2: a 2-d grid, columns across threads (coalesced) and rows across blocks: no division per element
//
// In place: x = max(0, x + bias), summed in Acc<T> and rounded once. One read and one write of x
// (the product's fresh output) and C bias values, instead of a bias add and a ReLU kernel, each
// reading and writing x (and, before this kernel, a bias fill that the product then read back).
// Shapes: x (rows, C) C-contiguous, bias (C,) of x's type or float (a float32 master). Templates
// over T (float, f16, double, bf16) and the bias type B, instantiated by name from cupy_launch.py.
// Standalone syntax check:
//   nvcc -std=c++17 -arch=sm_90 -I.. -c cuda.cu -o /dev/null   (in this folder; -I.. finds common.cuh)

#include "common.cuh"

template <typename T, typename B>
__global__ void bias_relu_forward_v1(T* __restrict__ x, const B* __restrict__ bias, long long n, int C) {
    typedef typename Acc<T>::type A;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const A v = load(x[i]) + load(bias[i % C]);
        store(x[i], v > A(0) ? v : A(0));
    }
}

template <typename T, typename B>
__global__ void bias_relu_forward_v2(T* __restrict__ x, const B* __restrict__ bias, long long rows, int C) {
    typedef typename Acc<T>::type A;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= C) return;
    const A b = load(bias[j]);
    for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
        const long long i = r * C + j;
        const A v = load(x[i]) + b;
        store(x[i], v > A(0) ? v : A(0));
    }
}
