// float <-> bfloat16 conversion on the GPU; spec: reference.py (bf16 travels as uint16 bits).
//
// v1: one thread per element: y = convert(x) through float32 (load/store in common.cuh)
// v2: eight elements per thread with 16-byte loads and stores (Pack); the launcher uses it
//     when both pointers are 16-byte aligned, and the last n % 8 elements go one by one
//
// Narrowing rounds to nearest even and keeps NaN and inf (common.cuh bf16_bits); widening is
// exact. float64 meets float32 only through to_f32 and store(double&, float) (common.cuh):
// exact under CuPy's -ftz=true, where a plain (float) cast flushes subnormals to 0.
// Bytes per element: read sizeof(In), write sizeof(Out). Templates over the input and
// output types (float, f16, double, bf16), instantiated by name from cupy_launch.py.
// Standalone syntax check:
//   nvcc -std=c++17 -arch=sm_90 -I.. -c cuda.cu -o /dev/null   (in this folder; -I.. finds common.cuh)

#include "common.cuh"

template <typename In, typename Out>
__global__ void bf16_cast_v1(Out* __restrict__ y, const In* __restrict__ x, long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) store(y[i], to_f32(load(x[i])));
}

// N values moved as whole 16-byte words (two for float, four for double, one for 16-bit types)
template <typename T, int N> struct __align__(16) Pack { T v[N]; };

template <typename In, typename Out>
__global__ void bf16_cast_v2(Out* __restrict__ y, const In* __restrict__ x, long long n) {
    constexpr int N = 8;
    const long long first = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * N;
    if (first + N <= n) {
        const Pack<In, N> in = *reinterpret_cast<const Pack<In, N>*>(x + first);
        Pack<Out, N> out;
#pragma unroll
        for (int k = 0; k < N; ++k) store(out.v[k], to_f32(load(in.v[k])));
        *reinterpret_cast<Pack<Out, N>*>(y + first) = out;
    } else {
        for (long long i = first; i < n; ++i) store(y[i], to_f32(load(x[i])));  // the tail
    }
}
