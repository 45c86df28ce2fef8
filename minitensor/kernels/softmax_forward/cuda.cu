// Softmax forward on the GPU (§3.2.1 Eq. (1), masking §3.2.3); spec: reference.py.
//
// v1: naive port of the reference: one thread per row, three passes (max, sum, write)
// v2: one warp per row: online max+sum in one read pass (shuffles), then a write pass
// v3: one warp per row with the row held in registers: x read once, y written once; x and the
//     mask are loaded independently (x is not skipped where blocked), so neither waits on the other
// v4: v3 with ROWS rows per warp (short rows, L <= 128): ROWS*VPT independent loads in flight
//
// Shapes: L = keys per row, rows = prod(x.shape[:-1]) seen as (d0, d1, d2) for the mask.
// The mask is a zero-stride broadcast view: ms0..ms3 are its strides (in bytes = elements
// of bool) over (d0, d1, d2, L), so a (B,1,1,L) padding or (1,1,T,L) causal mask is never
// copied out to (B,H,T,L). Blocked entries become -inf; a fully blocked row gives zeros.
//
// Non-finite entries (reference.py): -inf gets 0; a row with nothing above -inf gives zeros; a
// row whose max is +inf gives its +inf entries equal shares (softmax_term counts them as 1, the
// rest 0); a NaN in an unblocked entry makes the row NaN (softmax_inv passes the NaN sum on).
// The max is taken with fmax, which skips NaN: the NaN still reaches the sum through exp.
//
// Kernels are templates over the element type T (float, f16, double, bf16), instantiated by
// name from cupy_launch.py. Standalone syntax check:
//   nvcc -std=c++17 -arch=sm_90 -I.. -c cuda.cu -o /dev/null   (in this folder; -I.. finds common.cuh)

#include "common.cuh"

// One entry's term of the row sum, e^(v - m) for the row max m: 0 for -inf (also when m is -inf,
// where e^(-inf - -inf) would be NaN); for a +inf max, 1 on the +inf entries and 0 elsewhere.
template <typename A> __device__ __forceinline__ A softmax_term(A v, A m) {
    if (m == -neg_inf<A>()) return v == m ? A(1) : (v == v ? A(0) : v);  // NaN stays NaN
    return v == neg_inf<A>() ? A(0) : exp_(v - m);
}

// 1 / (row sum): 0 for an empty row (zeros out), NaN for a NaN sum (a NaN row out).
template <typename A> __device__ __forceinline__ A softmax_inv(A s) {
    return s > A(0) ? A(1) / s : (s == s ? A(0) : s);
}

// Offset of row r's mask entries: r = ((i0 * d1) + i1) * d2 + i2.
__device__ __forceinline__ long long mask_row_offset(long long r, int d1, int d2, long long ms0,
                                                     long long ms1, long long ms2) {
    const long long i2 = r % d2, t = r / d2;
    return (t / d1) * ms0 + (t % d1) * ms1 + i2 * ms2;
}

template <typename T>
__global__ void softmax_forward_v1(T* __restrict__ y, const T* __restrict__ x,
                                   const unsigned char* __restrict__ mask, int has_mask,
                                   long long ms0, long long ms1, long long ms2, long long ms3,
                                   int d1, int d2, typename Acc<T>::type scale, long long rows,
                                   int L) {
    typedef typename Acc<T>::type A;
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const T* xr = x + r * L;
    T* yr = y + r * L;
    const unsigned char* mr = mask + (has_mask ? mask_row_offset(r, d1, d2, ms0, ms1, ms2) : 0);
    A row_max = neg_inf<A>();
    for (int j = 0; j < L; ++j)
        if (!(has_mask && mr[j * ms3])) row_max = max_(row_max, scale * load(xr[j]));
    A total = 0;
    for (int j = 0; j < L; ++j)
        if (!(has_mask && mr[j * ms3])) total += softmax_term(scale * load(xr[j]), row_max);
    const A inv = softmax_inv(total);  // fully blocked row -> zeros
    for (int j = 0; j < L; ++j) {
        const bool blocked = has_mask && mr[j * ms3];
        store(yr[j], blocked ? A(0) : softmax_term(scale * load(xr[j]), row_max) * inv);
    }
}

template <typename T>
__global__ void softmax_forward_v2(T* __restrict__ y, const T* __restrict__ x,
                                   const unsigned char* __restrict__ mask, int has_mask,
                                   long long ms0, long long ms1, long long ms2, long long ms3,
                                   int d1, int d2, typename Acc<T>::type scale, long long rows,
                                   int L) {
    typedef typename Acc<T>::type A;
    const int lane = threadIdx.x & 31;
    const long long r = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;  // whole warp leaves together: shuffles below stay full-warp
    const T* xr = x + r * L;
    T* yr = y + r * L;
    const unsigned char* mr = mask + (has_mask ? mask_row_offset(r, d1, d2, ms0, ms1, ms2) : 0);
    // online softmax: running max m and sum s of exp(v - m), rescaled when m grows
    A m = neg_inf<A>(), s = 0;
    for (int j = lane; j < L; j += 32) {
        if (has_mask && mr[j * ms3]) continue;
        const A v = scale * load(xr[j]);
        if (v > m) {
            s = s * exp_(m - v) + A(1);
            m = v;
        } else {
            s += softmax_term(v, m);
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        const A m2 = __shfl_xor_sync(0xffffffffu, m, offset);
        const A s2 = __shfl_xor_sync(0xffffffffu, s, offset);
        online_merge(m, s, m2, s2);
    }
    if (m == -neg_inf<A>()) {  // +inf max (warp-uniform, rare): the online sum is inf - inf, count again
        s = 0;
        for (int j = lane; j < L; j += 32)
            if (!(has_mask && mr[j * ms3])) s += softmax_term(scale * load(xr[j]), m);
        s = warp_sum(s);
    }
    const A inv = softmax_inv(s);
    for (int j = lane; j < L; j += 32) {
        const bool blocked = has_mask && mr[j * ms3];
        store(yr[j], blocked ? A(0) : softmax_term(scale * load(xr[j]), m) * inv);
    }
}

// VPT = values per lane (compile time, so v[] stays in registers); needs L <= 32 * VPT.
template <typename T, int VPT>
__global__ void softmax_forward_v3(T* __restrict__ y, const T* __restrict__ x,
                                   const unsigned char* __restrict__ mask, int has_mask,
                                   long long ms0, long long ms1, long long ms2, long long ms3,
                                   int d1, int d2, typename Acc<T>::type scale, long long rows,
                                   int L) {
    typedef typename Acc<T>::type A;
    const int lane = threadIdx.x & 31;
    const long long r = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;
    const T* xr = x + r * L;
    T* yr = y + r * L;
    const unsigned char* mr = mask + (has_mask ? mask_row_offset(r, d1, d2, ms0, ms1, ms2) : 0);
    A v[VPT];
    A m = neg_inf<A>();
#pragma unroll
    for (int i = 0; i < VPT; ++i) {  // VPT independent loads in flight per lane
        const int j = lane + 32 * i;
        v[i] = neg_inf<A>();
        if (j < L) {  // x is read whether or not the mask blocks it: the two loads do not wait on each other
            const A xv = scale * load(xr[j]);
            v[i] = (has_mask && mr[j * ms3]) ? neg_inf<A>() : xv;
        }
        m = max_(m, v[i]);
    }
    for (int offset = 16; offset > 0; offset >>= 1) m = max_(m, __shfl_xor_sync(0xffffffffu, m, offset));
    A s = 0;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        v[i] = softmax_term(v[i], m);  // blocked (-inf) -> 0, never NaN from the mask
        s += v[i];
    }
    for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
    const A inv = softmax_inv(s);
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int j = lane + 32 * i;
        if (j < L) store(yr[j], v[i] * inv);
    }
}

// ROWS rows per warp, each held in registers as in v3: for short rows a lane has only VPT loads
// of one row to wait on, so batching rows keeps more bytes in flight (needs L <= 32 * VPT).
template <typename T, int VPT, int ROWS>
__global__ void softmax_forward_v4(T* __restrict__ y, const T* __restrict__ x,
                                   const unsigned char* __restrict__ mask, int has_mask,
                                   long long ms0, long long ms1, long long ms2, long long ms3,
                                   int d1, int d2, typename Acc<T>::type scale, long long rows,
                                   int L) {
    typedef typename Acc<T>::type A;
    const int lane = threadIdx.x & 31;
    const long long r0 = ((long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * ROWS;
    if (r0 >= rows) return;  // warp-uniform
    A v[ROWS][VPT], m[ROWS], s[ROWS];
#pragma unroll
    for (int k = 0; k < ROWS; ++k) {  // all loads of all ROWS rows first
        const long long r = r0 + k;
        const bool live = r < rows;
        const unsigned char* mr = mask + (has_mask && live ? mask_row_offset(r, d1, d2, ms0, ms1, ms2) : 0);
        m[k] = neg_inf<A>();
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const int j = lane + 32 * i;
            v[k][i] = neg_inf<A>();
            if (live && j < L) {  // as in v3: the x and mask loads are independent
                const A xv = scale * load(x[r * L + j]);
                v[k][i] = (has_mask && mr[j * ms3]) ? neg_inf<A>() : xv;
            }
            m[k] = max_(m[k], v[k][i]);
        }
    }
#pragma unroll
    for (int k = 0; k < ROWS; ++k) {
        for (int offset = 16; offset > 0; offset >>= 1)
            m[k] = max_(m[k], __shfl_xor_sync(0xffffffffu, m[k], offset));
        s[k] = 0;
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            v[k][i] = softmax_term(v[k][i], m[k]);  // blocked -> 0
            s[k] += v[k][i];
        }
        for (int offset = 16; offset > 0; offset >>= 1) s[k] += __shfl_xor_sync(0xffffffffu, s[k], offset);
    }
#pragma unroll
    for (int k = 0; k < ROWS; ++k) {
        const long long r = r0 + k;
        const A inv = softmax_inv(s[k]);
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const int j = lane + 32 * i;
            if (r < rows && j < L) store(y[r * L + j], v[k][i] * inv);
        }
    }
}
