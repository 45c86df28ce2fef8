// Inverted dropout on the GPU (§5.4 "Residual Dropout"); spec: reference.py.
//
// v1: one thread per element: y = x * 1/(1-p) where u >= p, else 0
//
// The random draws u come in as an array (the caller's RNG), so forward and backward are the
// same call with the same u. p_u is p rounded to u's dtype (NumPy compares u >= p in u's
// dtype), compared in double so no draw flips. Bytes per element: read x and u, write y.
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
    store(y[i], double(load(u[i])) >= p_u ? load(x[i]) * keep_scale : A(0));
}
