// Label-smoothed cross-entropy forward + dlogits on the GPU (§5.4); spec: reference.py.
//
// v1: naive port: one thread per row, three passes (max, sums, write)
// v2: one block per row: one read pass (online max + sum of exp + sum of logits), block
//     reduction through shared memory, then one pass writing dlogits (the re-read mostly hits L2)
//
// Never builds q: with u = smoothing mass per other token (eps/(V-2), or eps/(V-1) without a
// pad token; passed in as `smooth`),
//   loss = -sum_j q_j (x_j - lse) = sum(q) lse - (1-eps) x_t - u (sum_j x_j - x_t - x_pad)
//   nll = lse - x_t,   dlogits_j = softmax(x)_j - q_j
// Rows whose target is pad_idx give zeros (pad_idx < 0 means none).
// Shapes: N = rows, V = vocabulary. loss, nll: (N,) in Acc<T>; dlogits (N, V) in T.
// Templates over T (float, f16, double), instantiated by name from cupy_launch.py.
// Standalone syntax check:
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

__device__ __forceinline__ float exp_(float v) { return expf(v); }
__device__ __forceinline__ double exp_(double v) { return exp(v); }
__device__ __forceinline__ float log_(float v) { return logf(v); }
__device__ __forceinline__ double log_(double v) { return log(v); }
template <typename A> __device__ __forceinline__ A neg_inf();
template <> __device__ __forceinline__ float neg_inf<float>() { return __int_as_float((int)0xff800000); }
template <> __device__ __forceinline__ double neg_inf<double>() {
    return __longlong_as_double((long long)0xfff0000000000000ULL);
}

// Merge two online-softmax partials (max m, sum s of exp(x - m)).
template <typename A> __device__ __forceinline__ void online_merge(A& m, A& s, A m2, A s2) {
    const A mn = m > m2 ? m : m2;
    if (mn == neg_inf<A>()) return;  // both partials empty
    s = s * exp_(m - mn) + s2 * exp_(m2 - mn);
    m = mn;
}

template <typename T>
__device__ __forceinline__ void write_row_stats(typename Acc<T>::type* loss, typename Acc<T>::type* nll,
                                                long long r, const T* xr, long long t,
                                                long long pad_idx, int V, typename Acc<T>::type lse,
                                                typename Acc<T>::type sum_x,
                                                typename Acc<T>::type eps_ls,
                                                typename Acc<T>::type smooth) {
    typedef typename Acc<T>::type A;
    const A x_t = load(xr[t]);
    const A x_pad = pad_idx >= 0 ? load(xr[pad_idx]) : A(0);
    // sum(q) is 1 except in tiny vocabularies (V = 2 with a pad token: the pad takes no mass)
    const A q_sum = (A(1) - eps_ls) + smooth * A(V - 1 - (pad_idx >= 0 ? 1 : 0));
    nll[r] = lse - x_t;
    loss[r] = q_sum * lse - (A(1) - eps_ls) * x_t - smooth * (sum_x - x_t - x_pad);
}

template <typename T>
__global__ void cross_entropy_forward_v1(typename Acc<T>::type* __restrict__ loss,
                                         typename Acc<T>::type* __restrict__ nll,
                                         T* __restrict__ dlogits, const T* __restrict__ logits,
                                         const long long* __restrict__ targets,
                                         typename Acc<T>::type eps_ls,
                                         typename Acc<T>::type smooth, long long pad_idx,
                                         long long rows, int V) {
    typedef typename Acc<T>::type A;
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const T* xr = logits + r * V;
    T* dr = dlogits + r * V;
    const long long t = targets[r];
    if (t == pad_idx) {  // padding row: no loss, no gradient
        for (int j = 0; j < V; ++j) store(dr[j], A(0));
        loss[r] = 0;
        nll[r] = 0;
        return;
    }
    A m = neg_inf<A>();
    for (int j = 0; j < V; ++j) m = load(xr[j]) > m ? load(xr[j]) : m;
    A s = 0, sum_x = 0;
    for (int j = 0; j < V; ++j) {
        s += exp_(load(xr[j]) - m);
        sum_x += load(xr[j]);
    }
    write_row_stats<T>(loss, nll, r, xr, t, pad_idx, V, m + log_(s), sum_x, eps_ls, smooth);
    for (int j = 0; j < V; ++j) {
        const A q = j == t ? A(1) - eps_ls : (j == pad_idx ? A(0) : smooth);
        store(dr[j], exp_(load(xr[j]) - m) / s - q);
    }
}

template <typename T>
__global__ void cross_entropy_forward_v2(typename Acc<T>::type* __restrict__ loss,
                                         typename Acc<T>::type* __restrict__ nll,
                                         T* __restrict__ dlogits, const T* __restrict__ logits,
                                         const long long* __restrict__ targets,
                                         typename Acc<T>::type eps_ls,
                                         typename Acc<T>::type smooth, long long pad_idx,
                                         long long rows, int V) {
    typedef typename Acc<T>::type A;
    __shared__ A warp_m[32], warp_s[32], warp_x[32];
    const long long r = blockIdx.x;  // one block per row
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const T* xr = logits + r * V;
    T* dr = dlogits + r * V;
    const long long t = targets[r];
    if (t == pad_idx) {  // block-uniform branch: padding row gives zeros
        for (int j = threadIdx.x; j < V; j += blockDim.x) store(dr[j], A(0));
        if (threadIdx.x == 0) {
            loss[r] = 0;
            nll[r] = 0;
        }
        return;
    }
    // one read pass: online max m and sum s of exp(x - m), plus the plain sum of x
    A m = neg_inf<A>(), s = 0, sum_x = 0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        const A v = load(xr[j]);
        sum_x += v;
        if (v > m) {
            s = s * exp_(m - v) + A(1);
            m = v;
        } else {
            s += exp_(v - m);
        }
    }
    // block reduction: shuffles within each warp, then warp 0 over the warps' partials
    for (int offset = 16; offset > 0; offset >>= 1) {
        online_merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
        sum_x += __shfl_xor_sync(0xffffffffu, sum_x, offset);
    }
    if (lane == 0) {
        warp_m[warp] = m;
        warp_s[warp] = s;
        warp_x[warp] = sum_x;
    }
    __syncthreads();
    if (warp == 0) {
        m = lane < warps ? warp_m[lane] : neg_inf<A>();
        s = lane < warps ? warp_s[lane] : A(0);
        sum_x = lane < warps ? warp_x[lane] : A(0);
        for (int offset = 16; offset > 0; offset >>= 1) {
            online_merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
            sum_x += __shfl_xor_sync(0xffffffffu, sum_x, offset);
        }
        if (lane == 0) {
            warp_m[0] = m;
            warp_s[0] = s;
            write_row_stats<T>(loss, nll, r, xr, t, pad_idx, V, m + log_(s), sum_x, eps_ls, smooth);
        }
    }
    __syncthreads();
    m = warp_m[0];
    const A inv_s = A(1) / warp_s[0];
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        const A q = j == t ? A(1) - eps_ls : (j == pad_idx ? A(0) : smooth);
        store(dr[j], exp_(load(xr[j]) - m) * inv_s - q);
    }
}
