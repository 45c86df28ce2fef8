// Embedding backward on the GPU (§3.4): scatter-add rows of dout into dweight; spec: reference.py.
//
// v1: one thread per (token, column), atomicAdd into a float32/float64 table (sum order varies
//     from run to run, so the last bits do too)
// v2: deterministic: the launcher sorts ids; one block row per run of equal ids, one thread per
//     column sums its run in sorted order and writes the table row once (no atomics)
//
// An id outside [0, num_embeddings) writes no row: v1 adds NaN to row 0 instead and v2 leaves its
// run out (its launcher then adds NaN to row 0), so the step's finiteness check sees the error and
// nothing is written outside the table.
// Shapes: N = tokens (B*T), D = d_model, num_embeddings = table rows (V).
// Templates over T (float, f16, double), instantiated by name from cupy_launch.py.
// Standalone syntax check:
//   nvcc -std=c++17 -arch=sm_90 -I.. -c cuda.cu -o /dev/null   (in this folder; -I.. finds common.cuh)

#include "common.cuh"

// dweight: (num_embeddings, D) in Acc<T>, zeroed by the launcher.
template <typename T>
__global__ void embedding_backward_v1(typename Acc<T>::type* __restrict__ dweight,
                                      const T* __restrict__ dout, const long long* __restrict__ ids,
                                      long long N, int D, long long num_embeddings) {
    typedef typename Acc<T>::type A;
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // flat (token, column)
    if (k >= N * D) return;
    const long long i = k / D, d = k % D, id = ids[i];
    if (id < 0 || id >= num_embeddings) {
        atomicAdd(&dweight[d], -neg_inf<A>() - -neg_inf<A>());  // NaN into row 0, never off the table
        return;
    }
    atomicAdd(&dweight[id * D + d], load(dout[k]));  // repeated ids add up
}

// order: token indices sorted by id; run_start: first sorted position of each run of equal ids.
// dweight: (num_embeddings, D) in T, zeroed by the launcher; each touched row is written once.
template <typename T>
__global__ void embedding_backward_v2(T* __restrict__ dweight, const T* __restrict__ dout,
                                      const long long* __restrict__ order,
                                      const long long* __restrict__ sorted_ids,
                                      const long long* __restrict__ run_start, long long runs,
                                      long long N, int D, long long num_embeddings) {
    typedef typename Acc<T>::type A;
    const long long run = blockIdx.x;
    const int d = blockIdx.y * blockDim.x + threadIdx.x;
    if (d >= D) return;
    const long long start = run_start[run], end = run + 1 < runs ? run_start[run + 1] : N;
    if (sorted_ids[start] < 0 || sorted_ids[start] >= num_embeddings) return;  // the launcher flags it
    A sum = 0;
    for (long long s = start; s < end; ++s) sum += load(dout[order[s] * D + d]);  // fixed order
    store(dweight[sorted_ids[start] * D + d], sum);
}
