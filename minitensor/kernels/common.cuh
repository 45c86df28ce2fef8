// Device helpers shared by every kernels/<op>/cuda.cu, which starts with #include "common.cuh".
//
// It needs no CUDA header: NVRTC under CuPy may run without them (no cuda_fp16.h, no
// cuda_runtime.h), so this file and the kernels use only built-ins and inline PTX.
// cupy_launcher.py pastes this file into each cuda.cu's text before compiling (CuPy caches
// kernels on disk by source text, so an edit here must change that text); the standalone check
// finds it with -I..:   nvcc -std=c++17 -arch=sm_90 -I.. -c cuda.cu -o /dev/null
#ifndef MINITENSOR_COMMON_CUH
#define MINITENSOR_COMMON_CUH

// ---- element types -----------------------------------------------------------
// float16 travels as its raw 16 bits and is converted with PTX cvt (no cuda_fp16.h).
// bfloat16 travels as its raw 16 bits too (uint16 arrays on the host, see minitensor/dtypes.py):
// the top half of a float32, so widening is a shift and narrowing rounds to nearest even in
// integer arithmetic, bit for bit what kernels/bf16_cast/reference.py does (no cuda_bf16.h).
// Acc<T> is the type statistics are kept in: float32, or float64 for float64.
struct __align__(2) f16 { unsigned short bits; };
struct __align__(2) bf16 { unsigned short bits; };
template <typename T> struct Acc { typedef float type; };
template <> struct Acc<double> { typedef double type; };

// float32 <-> float64 exactly. CuPy compiles with -ftz=true after our own options, and under it a
// plain (float)d or (double)f flushes float32 subnormals to zero (cvt.rn.ftz.f32.f64,
// cvt.ftz.f64.f32: 1e-40 would become 0); PTX written out has no .ftz, as the f16 ones below.
// tests/minitensor/kernels/test_nvrtc.py holds every kernel's PTX to it.
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(double v) {
    float f;
    asm("cvt.rn.f32.f64 %0, %1;" : "=f"(f) : "d"(v));
    return f;
}
__device__ __forceinline__ double to_f64(double v) { return v; }
__device__ __forceinline__ double to_f64(float v) {
    double d;
    asm("cvt.f64.f32 %0, %1;" : "=d"(d) : "f"(v));
    return d;
}

__device__ __forceinline__ float load(float v) { return v; }
__device__ __forceinline__ double load(double v) { return v; }
__device__ __forceinline__ float load(f16 v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
    return f;
}
__device__ __forceinline__ void store(float& dst, float v) { dst = v; }
__device__ __forceinline__ void store(double& dst, double v) { dst = v; }
__device__ __forceinline__ void store(double& dst, float v) { dst = to_f64(v); }  // widened exactly
__device__ __forceinline__ void store(f16& dst, float v) {
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(dst.bits) : "f"(v));
}
__device__ __forceinline__ float load(bf16 v) { return __uint_as_float((unsigned)v.bits << 16); }
// float32 -> bf16 bits: nearest, ties to even (a carry out of the mantissa bumps the exponent,
// so the largest floats round to inf); NaN stays a quiet NaN with its sign (no carry into inf).
__device__ __forceinline__ unsigned short bf16_bits(float v) {
    const unsigned u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ void store(bf16& dst, float v) { dst.bits = bf16_bits(v); }

// ---- math in Acc<T>: one name for float and double, so a template picks expf or exp -----
__device__ __forceinline__ float exp_(float v) { return expf(v); }
__device__ __forceinline__ double exp_(double v) { return exp(v); }
__device__ __forceinline__ float log_(float v) { return logf(v); }
__device__ __forceinline__ double log_(double v) { return log(v); }
__device__ __forceinline__ float sqrt_(float v) { return sqrtf(v); }
__device__ __forceinline__ double sqrt_(double v) { return sqrt(v); }
__device__ __forceinline__ float rsqrt_(float v) { return rsqrtf(v); }
__device__ __forceinline__ double rsqrt_(double v) { return rsqrt(v); }
__device__ __forceinline__ float max_(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double max_(double a, double b) { return fmax(a, b); }
template <typename A> __device__ __forceinline__ A neg_inf();  // bit patterns: no math header
template <> __device__ __forceinline__ float neg_inf<float>() { return __int_as_float((int)0xff800000); }
template <> __device__ __forceinline__ double neg_inf<double>() {
    return __longlong_as_double((long long)0xfff0000000000000ULL);
}

// ---- random draws --------------------------------------------------------------
// u_i = top 24 bits of SplitMix64(seed + (i + 1) * golden ratio) / 2^24, as CupyBackend.uniform:
// counter-based, so the dropout kernels draw element i's number from (seed, i), no state or array.
__device__ __forceinline__ float splitmix_uniform(unsigned long long seed, long long i) {
    unsigned long long z = seed + (unsigned long long)(i + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z = z ^ (z >> 31);
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

// The row of the (B, T, ...) transpose that row r of a time-major (T, B, ...) array is, when batch > 0
// (r = t * batch + b -> b * positions + t); r itself otherwise. Dropout draws by this row, so a
// mask does not depend on the layout.
__device__ __forceinline__ long long logical_row(long long r, long long positions, long long batch) {
    if (batch <= 0) return r;
    const long long t = r / batch;
    return (r - t * batch) * positions + t;
}

// ---- reductions ----------------------------------------------------------------
// Sum over the 32 lanes of a warp (butterfly: every lane gets the total); needs a full warp.
template <typename A> __device__ __forceinline__ A warp_sum(A v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// Merge two online-softmax partials (max m, sum s of exp(v - m)). An empty partial has
// m = -inf; when both maxima are -inf, add the sums (0, or NaN from a NaN entry) without
// rescaling: -inf - -inf would be NaN.
template <typename A> __device__ __forceinline__ void online_merge(A& m, A& s, A m2, A s2) {
    const A mn = m > m2 ? m : m2;
    if (mn == neg_inf<A>()) {
        s += s2;
        return;
    }
    s = s * exp_(m - mn) + s2 * exp_(m2 - mn);
    m = mn;
}

#endif  // MINITENSOR_COMMON_CUH
