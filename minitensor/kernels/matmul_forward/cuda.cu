// Teaching GEMMs on the GPU: C = A @ B with A (M, K), B (K, N), C (M, N), all row-major.
// cuBLAS (cupy.matmul) stays the default; these kernels show where its speed comes from.
//
// v1: naive: one thread per output element, A row and B column read from global memory
// v2: shared-memory tiling: 32x32 tiles of A and B staged in shared memory, one output a thread
// v3: register blocking: 128x128x8 block tile, 8x8 outputs per thread kept in registers, A tile
//     stored transposed, two shared-memory buffers with the next tile prefetched into registers
// v4: fp16 tensor cores: mma.sync m16n8k16 with fp32 accumulation, ldmatrix from padded shared
//     memory, 128x128x32 block tile, 8 warps of 64x32, cp.async double buffering; C in fp16.
//     Needs K % 8 == 0 and N % 8 == 0 (the launcher pads) and 16-byte aligned A and B.
// v5: v3 asking for two blocks per SM (__launch_bounds__(256, 2)): registers capped at 128 (v3
//     uses 159, so one block fits), a 48-byte spill, twice the warps to hide load latency
//
// FLOPs: 2*M*N*K. v1-v3 are float32, v4 float16 (raw 16-bit storage, f16 in ../common.cuh).
// Standalone build check:
//   nvcc -std=c++17 -arch=sm_90 -I.. -c cuda.cu -o /dev/null   (in this folder; -I.. finds common.cuh)

#include "common.cuh"

extern "C" __global__ void matmul_forward_v1(float* __restrict__ c, const float* __restrict__ a,
                                             const float* __restrict__ b, int M, int N, int K) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;  // threadIdx.x along N: coalesced b, c
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.f;
    for (int k = 0; k < K; ++k) acc += a[(long long)row * K + k] * b[(long long)k * N + col];
    c[(long long)row * N + col] = acc;
}

#define TILE 32
// block (32, 32): thread (ty, tx) owns C[row, col]; each A/B element is read from global
// memory by one thread per tile instead of by all 32 threads of a row or column.
extern "C" __global__ void matmul_forward_v2(float* __restrict__ c, const float* __restrict__ a,
                                             const float* __restrict__ b, int M, int N, int K) {
    __shared__ float as[TILE][TILE];
    __shared__ float bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        as[ty][tx] = (row < M && k0 + tx < K) ? a[(long long)row * K + k0 + tx] : 0.f;
        bs[ty][tx] = (k0 + ty < K && col < N) ? b[(long long)(k0 + ty) * N + col] : 0.f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += as[ty][k] * bs[k][tx];  // as: broadcast, bs: no conflict
        __syncthreads();
    }
    if (row < M && col < N) c[(long long)row * N + col] = acc;
}

#define BM 128
#define BN 128
#define BK 8
#define AS_PAD 4  // as[k][m] row of 132 floats: the transposing store hits 32 distinct banks

// Tile (k0..k0+8) of A (128 x 8) and B (8 x 128) into registers: 4 + 4 values per thread.
__device__ __forceinline__ void v3_load_global(float (&ar)[4], float (&br)[4], const float* a,
                                               const float* b, int M, int N, int K, int m0,
                                               int n0, int k0, int tid) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int e = tid + i * 256;
        const int am = m0 + e / BK, ak = k0 + e % BK;
        ar[i] = (am < M && ak < K) ? a[(long long)am * K + ak] : 0.f;
        const int bk = k0 + e / BN, bn = n0 + e % BN;
        br[i] = (bk < K && bn < N) ? b[(long long)bk * N + bn] : 0.f;
    }
}

__device__ __forceinline__ void v3_store_shared(float (*as)[BM + AS_PAD], float (*bs)[BN],
                                                const float (&ar)[4], const float (&br)[4], int tid) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int e = tid + i * 256;
        as[e % BK][e / BK] = ar[i];  // transposed: a column of the A tile becomes a row
        bs[e / BN][e % BN] = br[i];
    }
}

// 256 threads; thread (ty, tx) = (tid / 16, tid % 16) owns rows {ty*4+i, 64+ty*4+i} and
// columns {tx*4+j, 64+tx*4+j} (i, j < 4): split in two so float4 reads are conflict-free.
__device__ __forceinline__ void register_tiled(float* __restrict__ c, const float* __restrict__ a,
                                               const float* __restrict__ b, int M, int N, int K) {
    __shared__ __align__(16) float as[2][BK][BM + AS_PAD];
    __shared__ __align__(16) float bs[2][BK][BN];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;
    float ar[4], br[4];
    v3_load_global(ar, br, a, b, M, N, K, m0, n0, 0, tid);
    v3_store_shared(as[0], bs[0], ar, br, tid);
    __syncthreads();
    int buf = 0;
    for (int k0 = 0; k0 < K; k0 += BK) {
        const bool has_next = k0 + BK < K;
        if (has_next) v3_load_global(ar, br, a, b, M, N, K, m0, n0, k0 + BK, tid);  // in flight
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float ra[8], rb[8];
            const float4 a_lo = *reinterpret_cast<const float4*>(&as[buf][k][ty * 4]);
            const float4 a_hi = *reinterpret_cast<const float4*>(&as[buf][k][64 + ty * 4]);
            const float4 b_lo = *reinterpret_cast<const float4*>(&bs[buf][k][tx * 4]);
            const float4 b_hi = *reinterpret_cast<const float4*>(&bs[buf][k][64 + tx * 4]);
            ra[0] = a_lo.x; ra[1] = a_lo.y; ra[2] = a_lo.z; ra[3] = a_lo.w;
            ra[4] = a_hi.x; ra[5] = a_hi.y; ra[6] = a_hi.z; ra[7] = a_hi.w;
            rb[0] = b_lo.x; rb[1] = b_lo.y; rb[2] = b_lo.z; rb[3] = b_lo.w;
            rb[4] = b_hi.x; rb[5] = b_hi.y; rb[6] = b_hi.z; rb[7] = b_hi.w;
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] += ra[i] * rb[j];  // 64 FMAs per 4 loads
        }
        // the other buffer was last read before the previous barrier: safe to overwrite
        if (has_next) v3_store_shared(as[buf ^ 1], bs[buf ^ 1], ar, br, tid);
        __syncthreads();
        buf ^= 1;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int col = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
            if (row < M && col < N) c[(long long)row * N + col] = acc[i][j];
        }
    }
}

extern "C" __global__ void __launch_bounds__(256)
matmul_forward_v3(float* __restrict__ c, const float* __restrict__ a, const float* __restrict__ b,
                  int M, int N, int K) {
    register_tiled(c, a, b, M, N, K);
}

// The same code, compiled for two resident blocks per SM: the compiler must fit 128 registers.
extern "C" __global__ void __launch_bounds__(256, 2)
matmul_forward_v5(float* __restrict__ c, const float* __restrict__ a, const float* __restrict__ b,
                  int M, int N, int K) {
    register_tiled(c, a, b, M, N, K);
}

// ---- v4: tensor cores through inline PTX (no mma.h / cuda_fp16.h needed under NVRTC) ----
#define TC_BM 128
#define TC_BN 128
#define TC_BK 32
#define TC_PAD 8  // halves (16 bytes) per shared row: ldmatrix's 8 row reads hit distinct banks

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned addr;
    asm("{ .reg .u64 u; cvta.to.shared.u64 u, %1; cvt.u32.u64 %0, u; }" : "=r"(addr) : "l"(p));
    return addr;
}

// 16-byte global -> shared copy that bypasses registers; src_bytes = 0 writes zeros.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(src_bytes));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// D (16x8, fp32) += A (16x16, fp16, row) * B (16x8, fp16, col)
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One 128x32 tile of A and one 32x128 tile of B: 512 + 512 chunks of 8 halves, 2 + 2 a thread.
__device__ __forceinline__ void v4_load_tile(unsigned short (*as)[TC_BK + TC_PAD],
                                             unsigned short (*bs)[TC_BN + TC_PAD], const f16* a,
                                             const f16* b, int M, int N, int K, int m0, int n0,
                                             int k0, int tid) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int chunk = tid + i * 256;
        const int ar = chunk >> 2, ak = (chunk & 3) * 8;
        const bool a_ok = m0 + ar < M && k0 + ak < K;
        cp_async16(&as[ar][ak], a_ok ? a + (long long)(m0 + ar) * K + k0 + ak : a, a_ok ? 16 : 0);
        const int bk = chunk >> 4, bn = (chunk & 15) * 8;
        const bool b_ok = k0 + bk < K && n0 + bn < N;
        cp_async16(&bs[bk][bn], b_ok ? b + (long long)(k0 + bk) * N + n0 + bn : b, b_ok ? 16 : 0);
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

extern "C" __global__ void __launch_bounds__(256)
matmul_forward_v4(f16* __restrict__ c, const f16* __restrict__ a, const f16* __restrict__ b,
                  int M, int N, int K) {
    __shared__ __align__(16) unsigned short as[2][TC_BM][TC_BK + TC_PAD];
    __shared__ __align__(16) unsigned short bs[2][TC_BK][TC_BN + TC_PAD];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 2, wn = warp & 3;  // warp tile: rows wm*64.., cols wn*32..
    const int m0 = blockIdx.y * TC_BM, n0 = blockIdx.x * TC_BN;
    float acc[4][4][4];  // [m16 tile][n8 tile][fragment]
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int f = 0; f < 4; ++f) acc[i][j][f] = 0.f;
    const int tiles = (K + TC_BK - 1) / TC_BK;
    v4_load_tile(as[0], bs[0], a, b, M, N, K, m0, n0, 0, tid);
    for (int t = 0; t < tiles; ++t) {
        const int buf = t & 1;
        if (t + 1 < tiles) {  // next tile's copy runs while this one is multiplied
            v4_load_tile(as[buf ^ 1], bs[buf ^ 1], a, b, M, N, K, m0, n0, (t + 1) * TC_BK, tid);
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TC_BK; kk += 16) {
            unsigned af[4][4], bf[4][2];
#pragma unroll
            for (int i = 0; i < 4; ++i)  // lanes 0-15 address rows 0-15 at k, 16-31 at k+8
                ldmatrix_x4(af[i], &as[buf][wm * 64 + i * 16 + (lane & 15)][kk + (lane >> 4) * 8]);
#pragma unroll
            for (int jp = 0; jp < 2; ++jp) {  // transposed load: B rows are k, fragments want k pairs
                unsigned r[4];
                ldmatrix_x4_trans(r, &bs[buf][kk + (lane & 7) + ((lane >> 3) & 1) * 8]
                                        [wn * 32 + jp * 16 + (lane >> 4) * 8]);
                bf[2 * jp][0] = r[0];
                bf[2 * jp][1] = r[1];
                bf[2 * jp + 1][0] = r[2];
                bf[2 * jp + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) mma_16816(acc[i][j], af[i], bf[j][0], bf[j][1]);
        }
        __syncthreads();  // everyone is done with buf before the copy two steps on refills it
    }
    // fragment f of tile (i, j): row group + 8*(f >= 2), columns 2*(lane % 4) + (f % 2)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int row = m0 + wm * 64 + i * 16 + (lane >> 2);
            const int col = n0 + wn * 32 + j * 8 + (lane & 3) * 2;
            if (col < N) {
                if (row < M) {
                    store(c[(long long)row * N + col], acc[i][j][0]);
                    store(c[(long long)row * N + col + 1], acc[i][j][1]);
                }
                if (row + 8 < M) {
                    store(c[(long long)(row + 8) * N + col], acc[i][j][2]);
                    store(c[(long long)(row + 8) * N + col + 1], acc[i][j][3]);
                }
            }
        }
    }
}
