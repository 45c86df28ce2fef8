// The bias's backward on the GPU: column sums of dy, through a ReLU or not; spec: reference.py.
//
// v1: naive port of the reference: one thread per column walks every row
// v2: a block per 32 columns: 32 lanes across the columns (coalesced rows), ROWS rows at a time
//     down the block; each thread sums its rows in registers, then the block adds the ROWS
//     partial sums of each column in shared memory, in a fixed order (deterministic)
//
// db[g, j] = sum_r dx[g, r, j], dx = dy where relu_out > 0, else 0 (MASK), or dy itself (dx not
// written). Replaces 1ᵀ dy as a matrix-vector product (a GEMV per Linear) and, with MASK, the ReLU
// backward's compare and multiply kernels. Sums in Acc<T>, written as Acc<T> (the float32 master's
// dtype under half-precision dy). Shapes: dy (G, R, C) C-contiguous, G leading (batch) entries.
// Templates over T (float, f16, double, bf16) and MASK, instantiated by name from cupy_launch.py.
// Standalone syntax check:
//   nvcc -std=c++17 -arch=sm_90 -I.. -c cuda.cu -o /dev/null   (in this folder; -I.. finds common.cuh)

#include "common.cuh"

#define BIAS_BACKWARD_ROWS 8  // v2: threadIdx.y, rows in flight per block

template <typename T, bool MASK>
__global__ void bias_backward_v1(T* __restrict__ dx, typename Acc<T>::type* __restrict__ db,
                                 const T* __restrict__ dy, const T* __restrict__ relu_out, long long R, int C,
                                 int G) {
    typedef typename Acc<T>::type A;
    const long long col = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // (g, j) flattened
    if (col >= (long long)G * C) return;
    const long long g = col / C, j = col % C;
    A total = 0;
    for (long long r = 0; r < R; ++r) {
        const long long i = (g * R + r) * C + j;
        A v = load(dy[i]);
        if (MASK) {
            if (!(load(relu_out[i]) > A(0))) v = A(0);
            store(dx[i], v);
        }
        total += v;
    }
    db[col] = total;
}

// block (32, BIAS_BACKWARD_ROWS), grid (ceil(C / 32), G)
template <typename T, bool MASK>
__global__ void bias_backward_v2(T* __restrict__ dx, typename Acc<T>::type* __restrict__ db,
                                 const T* __restrict__ dy, const T* __restrict__ relu_out, long long R, int C) {
    typedef typename Acc<T>::type A;
    __shared__ A partial[BIAS_BACKWARD_ROWS][33];  // 33: no bank conflicts down a column
    const long long g = blockIdx.y;
    const int j = blockIdx.x * 32 + threadIdx.x;
    A total = 0;
    if (j < C) {
        for (long long r = threadIdx.y; r < R; r += BIAS_BACKWARD_ROWS) {
            const long long i = (g * R + r) * C + j;
            A v = load(dy[i]);
            if (MASK) {
                if (!(load(relu_out[i]) > A(0))) v = A(0);
                store(dx[i], v);
            }
            total += v;
        }
    }
    partial[threadIdx.y][threadIdx.x] = total;
    __syncthreads();
    if (threadIdx.y == 0 && j < C) {
        A sum = 0;
        for (int k = 0; k < BIAS_BACKWARD_ROWS; ++k) sum += partial[k][threadIdx.x];
        db[g * C + j] = sum;
    }
}
