// Adam update on the GPU (§5.3), in place over flat buffers; spec: reference.py.
//
// v1: naive port: one thread per element, the grid covers all n
// v2: fixed grid (a few blocks per SM), each thread strides over 4 elements per trip with all
//     loads issued before any math, so more bytes are in flight per thread
//
// Math: m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//       param -= lr * (m / bc1) / (sqrt(v / bc2) + eps),  bc1 = 1 - b1^step, bc2 = 1 - b2^step
// (bc1, bc2 are computed on the host in float64). Bytes per element: read param, grad, m, v
// and write param, m, v: 7 values, 28 B in float32, plus 2 B when the half copy is written.
// half (H*, may be null): the updated param rounded to H (f16 or bf16) in the same pass, the
// copy of the weights mixed precision's forward multiplies with (none is cast in the forward).
// Templates over the parameter type P (float, double; m and v share it), the gradient type
// G (float, f16, double) and the half type H (f16, bf16; P when no half copy is asked for),
// instantiated by name from cupy_launch.py. Standalone syntax check:
//   nvcc -std=c++17 -arch=sm_90 -I.. -c cuda.cu -o /dev/null   (in this folder; -I.. finds common.cuh)

#include "common.cuh"

template <typename P>
__device__ __forceinline__ void adam_update(P& p, P& m, P& v, P g, P lr, P beta1, P beta2, P eps,
                                            P bc1, P bc2) {
    m = beta1 * m + (P(1) - beta1) * g;
    v = beta2 * v + (P(1) - beta2) * g * g;
    p -= lr * (m / bc1) / (sqrt_(v / bc2) + eps);  // bias-corrected moments
}

template <typename P, typename G, typename H>
__global__ void adam_step_v1(P* __restrict__ param, const G* __restrict__ grad, P* __restrict__ m,
                             P* __restrict__ v, H* __restrict__ half, P lr, P beta1, P beta2, P eps,
                             P bc1, P bc2, long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    P p = param[i], mi = m[i], vi = v[i];
    adam_update(p, mi, vi, P(load(grad[i])), lr, beta1, beta2, eps, bc1, bc2);
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
    if (half) store(half[i], p);  // uniform branch: every thread or none
}

template <typename P, typename G, typename H>
__global__ void adam_step_v2(P* __restrict__ param, const G* __restrict__ grad, P* __restrict__ m,
                             P* __restrict__ v, H* __restrict__ half, P lr, P beta1, P beta2, P eps,
                             P bc1, P bc2, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long base = (long long)blockIdx.x * blockDim.x + threadIdx.x; base < n; base += 4 * stride) {
        P p[4], mi[4], vi[4], g[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {  // issue all loads first: 16 independent loads in flight
            const long long i = base + k * stride;
            if (i < n) {
                p[k] = param[i];
                mi[k] = m[i];
                vi[k] = v[i];
                g[k] = P(load(grad[i]));
            }
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const long long i = base + k * stride;
            if (i < n) {
                adam_update(p[k], mi[k], vi[k], g[k], lr, beta1, beta2, eps, bc1, bc2);
                param[i] = p[k];
                m[i] = mi[k];
                v[i] = vi[k];
                if (half) store(half[i], p[k]);
            }
        }
    }
}
