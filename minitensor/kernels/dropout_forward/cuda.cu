// Inverted dropout on the GPU (§5.4 "Residual Dropout"); spec: reference.py.
//
// v1: one thread per element: y = x * 1/(1-p) where u >= p, else 0
//
// The random draws u come in as an array (the caller's RNG), so forward and backward are the
// same call with the same u. p_u is p rounded to u's dtype (NumPy compares u >= p in u's
// dtype), compared in double so no draw flips. Bytes per element: read x and u, write y.
// Templates over the element type T and the draws' type U (float, f16, double), instantiated
// by name from cupy_launch.py. Standalone syntax check:
//   nvcc -std=c++17 -arch=sm_90 -c cuda.cu -o /dev/null

// ---- element types (same prelude in every cuda.cu of this repo) ------------
// float16 travels as its raw 16 bits and is converted with PTX cvt, so the file
// needs no cuda_fp16.h (NVRTC under CuPy may run without the CUDA headers).
// Acc<T> is the type statistics are kept in: float32, or float64 for float64.
struct __align__(2) f16 { unsigned short bits; };
template <typename T> struct Acc { typedef float type; };
template <> struct Acc<double> { typedef double type; };

__device__ __forceinline__ float load(float v) { return v; }
__device__ __forceinline__ double load(double v) { return v; }
__device__ __forceinline__ float load(f16 v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
    return f;
}
__device__ __forceinline__ void store(float& dst, float v) { dst = v; }
__device__ __forceinline__ void store(double& dst, double v) { dst = v; }
__device__ __forceinline__ void store(f16& dst, float v) {
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(dst.bits) : "f"(v));
}

template <typename T, typename U>
__global__ void dropout_forward_v1(T* __restrict__ y, const T* __restrict__ x, const U* __restrict__ u,
                                   double p_u, typename Acc<T>::type keep_scale,
                                   long long n) {
    typedef typename Acc<T>::type A;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    store(y[i], double(load(u[i])) >= p_u ? load(x[i]) * keep_scale : A(0));
}
