// Label-smoothed cross-entropy forward + dlogits on the GPU; spec: reference.py.
//
// v1: naive port: one thread per row, three passes (max, sums, write)
// v2: one block per row: one read pass (online max + sum of exp + sum of logits), block
//     reduction through shared memory, then one pass writing dlogits (the re-read mostly hits L2)
//
// Never builds q: with s = smoothing and u = the mass on each other class (s/(V-2), or s/(V-1)
// when no class is ignored; passed in as `other_q`),
//   loss = -sum_j q_j (x_j - lse) = sum(q) lse - (1-s) x_t - u (sum_j x_j - x_t - x_ignore)
//   nll = lse - x_t,   dlogits_j = softmax(x)_j - q_j
// Rows whose target is ignore_index give zeros (ignore_index < 0 means none). A target outside
// [0, V) gives its row NaN loss, NaN nll and NaN dlogits, and reads nothing out of range: the
// error reaches the host at the step's finiteness check (no kernel writes or reads off the row).
// Shapes: N = rows, V = classes. loss, nll: (N,) in Acc<T>; dlogits (N, V) in T.
// Templates over T (float, f16, double), instantiated by name from cupy_launch.py.
// Standalone syntax check:
//   nvcc -std=c++17 -arch=sm_90 -I.. -c cuda.cu -o /dev/null   (in this folder; -I.. finds common.cuh)

#include "common.cuh"

template <typename T>
__device__ __forceinline__ void write_row_stats(typename Acc<T>::type* loss, typename Acc<T>::type* nll,
                                                long long r, const T* xr, long long t,
                                                long long ignore_index, int V, typename Acc<T>::type lse,
                                                typename Acc<T>::type sum_x,
                                                typename Acc<T>::type smoothing,
                                                typename Acc<T>::type other_q) {
    typedef typename Acc<T>::type A;
    const A x_t = load(xr[t]);
    const A x_ignore = ignore_index >= 0 ? load(xr[ignore_index]) : A(0);
    // sum(q) is 1 except for V = 2 with an ignored class (which takes no mass)
    const A q_sum = (A(1) - smoothing) + other_q * A(V - 1 - (ignore_index >= 0 ? 1 : 0));
    nll[r] = lse - x_t;
    loss[r] = q_sum * lse - (A(1) - smoothing) * x_t - other_q * (sum_x - x_t - x_ignore);
}

template <typename T>
__global__ void cross_entropy_forward_v1(typename Acc<T>::type* __restrict__ loss,
                                         typename Acc<T>::type* __restrict__ nll,
                                         T* __restrict__ dlogits, const T* __restrict__ logits,
                                         const long long* __restrict__ targets,
                                         typename Acc<T>::type smoothing,
                                         typename Acc<T>::type other_q, long long ignore_index,
                                         long long rows, int V) {
    typedef typename Acc<T>::type A;
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const T* xr = logits + r * V;
    T* dr = dlogits + r * V;
    const long long t = targets[r];
    if (t == ignore_index || t < 0 || t >= V) {  // ignored row: zeros; a bad target: NaN
        const A fill = t == ignore_index ? A(0) : -neg_inf<A>() - -neg_inf<A>();  // inf - inf = NaN
        for (int j = 0; j < V; ++j) store(dr[j], fill);
        loss[r] = fill;
        nll[r] = fill;
        return;
    }
    A m = neg_inf<A>();
    for (int j = 0; j < V; ++j) m = load(xr[j]) > m ? load(xr[j]) : m;
    A s = 0, sum_x = 0;
    for (int j = 0; j < V; ++j) {
        s += exp_(load(xr[j]) - m);
        sum_x += load(xr[j]);
    }
    write_row_stats<T>(loss, nll, r, xr, t, ignore_index, V, m + log_(s), sum_x, smoothing, other_q);
    for (int j = 0; j < V; ++j) {
        const A q = j == t ? A(1) - smoothing : (j == ignore_index ? A(0) : other_q);
        store(dr[j], exp_(load(xr[j]) - m) / s - q);
    }
}

template <typename T>
__global__ void cross_entropy_forward_v2(typename Acc<T>::type* __restrict__ loss,
                                         typename Acc<T>::type* __restrict__ nll,
                                         T* __restrict__ dlogits, const T* __restrict__ logits,
                                         const long long* __restrict__ targets,
                                         typename Acc<T>::type smoothing,
                                         typename Acc<T>::type other_q, long long ignore_index,
                                         long long rows, int V) {
    typedef typename Acc<T>::type A;
    __shared__ A warp_m[32], warp_s[32], warp_x[32];
    const long long r = blockIdx.x;  // one block per row
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const T* xr = logits + r * V;
    T* dr = dlogits + r * V;
    const long long t = targets[r];
    if (t == ignore_index || t < 0 || t >= V) {  // block-uniform: an ignored row gives zeros, a bad target NaN
        const A fill = t == ignore_index ? A(0) : -neg_inf<A>() - -neg_inf<A>();  // inf - inf = NaN
        for (int j = threadIdx.x; j < V; j += blockDim.x) store(dr[j], fill);
        if (threadIdx.x == 0) {
            loss[r] = fill;
            nll[r] = fill;
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
            write_row_stats<T>(loss, nll, r, xr, t, ignore_index, V, m + log_(s), sum_x, smoothing, other_q);
        }
    }
    __syncthreads();
    m = warp_m[0];
    const A inv_s = A(1) / warp_s[0];
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        const A q = j == t ? A(1) - smoothing : (j == ignore_index ? A(0) : other_q);
        store(dr[j], exp_(load(xr[j]) - m) * inv_s - q);
    }
}
