# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 17 · A GPU kernel, step by step: naive, tiled, tensor cores
#
# > While the two are similar in theoretical complexity, dot-product attention is
# > much faster and more space-efficient in practice, since it can be implemented
# > using highly optimized matrix multiplication code. (§3.2.1)
#
# > We trained our models on one machine with 8 NVIDIA P100 GPUs. (§5.2)
#
# Almost every FLOP of a Transformer step is a matrix product: the projections of
# §3.2.2, QKᵀ and the weighted sum of Eq. (1), the two layers of Eq. (2), the output
# softmax's logits. This chapter writes one, C = A B, as a GPU kernel three times,
# each time moving less data per multiply-add:
#
# 1. **naive**: one thread per output element, everything read from global memory;
# 2. **tiled**: a block of threads stages T × T tiles of A and B in shared memory,
#    so each number read from global memory is used T times;
# 3. **tensor cores**: a warp of 32 threads multiplies 16 × 16 by 16 × 8 tiles of
#    fp16 in one instruction, accumulating in fp32.
#
# The kernels are written with `numba.cuda`, so they run on a GPU when there is
# one and on numba's **CUDA simulator** otherwise (every CUDA thread becomes a
# Python thread: the same answers, timings that mean nothing). Beside each step is
# the CUDA C the library runs on a GPU, read from
# `minitensor/kernels/matmul_forward/cuda.cu`. Each kernel is checked against
# NumPy (`reference.py`), and instead of timing the simulator we **count** the
# global-memory loads each output costs, with a counter in the kernel itself.
#
# Shapes: A (M, K), B (K, N), C (M, N), all row-major; T the tile size.
#
# The library code this chapter builds:
# [`minitensor/kernels/matmul_forward/reference.py`](../minitensor/kernels/matmul_forward/reference.py),
# [`minitensor/kernels/matmul_forward/cuda.cu`](../minitensor/kernels/matmul_forward/cuda.cu).

# %%
import math
import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from _common import FAST, calls_to, fails, finish, numba_cuda, show
from minitensor.kernels.matmul_forward.reference import matmul_forward_ref

cuda, ON_GPU = numba_cuda()                  # before anything else imports numba.cuda
CUDA_C = Path(mt.__file__).parent / "kernels" / "matmul_forward" / "cuda.cu"
rng = np.random.default_rng(0)
print("running the kernels on", "the GPU" if ON_GPU else "the CUDA simulator (no GPU here)")


def cuda_source(name, path=CUDA_C):
    """The CUDA C of kernel or device function `name` in `path`, with the comment lines just above it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines)
                 if not line.startswith("//") and re.match(rf"(\S.*)?\b{name}\(", line))
    while start > 0 and lines[start - 1].startswith(("//", "#define", 'extern "C"')):
        start -= 1
    end = next(i for i in range(start, len(lines)) if lines[i] == "}")
    return "\n".join(lines[start:end + 1])


# %% [markdown]
# ## 1. Naive: one thread per output
#
# A GPU runs a kernel as a **grid** of **blocks** of threads; `cuda.grid(2)` is
# this thread's (x, y) position in the whole grid. Give each thread one output
# C[row, col] and let it loop over k: the kernel is the definition of the product.
# x runs along the columns, so threads next to each other in x read neighbouring
# elements of a B row (one wide, *coalesced* access) and the same A element.
#
# `loads[row, col]` counts the global-memory loads this thread issues: an output
# needs K numbers from A and K from B, and here each thread loads all 2K itself.
# Over the whole product that is 2MNK loads for matrices that hold MK + KN numbers:
# every element of A is loaded N times, every element of B M times.

# %%
@cuda.jit
def matmul_naive(c, a, b, loads):
    col, row = cuda.grid(2)                                 # x along N, y along M
    if row < c.shape[0] and col < c.shape[1]:
        acc = np.float32(0.0)
        for k in range(a.shape[1]):
            acc += a[row, k] * b[k, col]
            loads[row, col] += 2                            # a[row, k] and b[k, col], both from global memory
        c[row, col] = acc


def run(kernel, a, b, block):
    """C = A B and the load counts, with a grid of `block`-shaped blocks covering C."""
    (M, K), N = a.shape, b.shape[1]
    c, loads = np.zeros((M, N), dtype=np.float32), np.zeros((M, N), dtype=np.int64)
    grid = (math.ceil(N / block[0]), math.ceil(M / block[1]))
    kernel[grid, block](c, a, b, loads)
    return c, loads


M, K, N = (16, 16, 16) if FAST else (32, 64, 32)   # multiples of every tile size below
a = rng.standard_normal((M, K)).astype(np.float32)
b = rng.standard_normal((K, N)).astype(np.float32)
c_naive, loads_naive = run(matmul_naive, a, b, (8, 8))
print(cuda_source("matmul_forward_v1"))

# %% CHECK
mt.assert_close(c_naive, matmul_forward_ref(a, b), name="naive kernel vs NumPy")
assert (loads_naive == 2 * K).all(), f"naive: each output costs 2K = {2 * K} loads, counted {loads_naive.max()}"

# %% [markdown]
# ## 2. Tiled: share what a block reads
#
# The threads of a block that compute a T × T tile of C all need the same T rows
# of A and T columns of B. So the block walks along k in steps of T: each thread
# loads **one** element of the current A tile and **one** of the B tile into
# **shared memory** (on-chip, visible to the whole block), the block waits at a
# barrier (`cuda.syncthreads()`), and then each thread does T multiply-adds
# reading only shared memory. A second barrier keeps the tiles alive until every
# thread is done with them. Per output: 2 loads a step, K/T steps, **2K/T loads**
# instead of 2K. The tile size is a compile-time constant (shared arrays have a
# fixed size), so we build one kernel per T. (Sizes here are multiples of T;
# exercise 2 removes that limit.)

# %%
def make_tiled(T):
    """The shared-memory tiled kernel for T x T blocks of threads."""

    @cuda.jit
    def matmul_tiled(c, a, b, loads):
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        row, col = cuda.blockIdx.y * T + ty, cuda.blockIdx.x * T + tx
        a_tile = cuda.shared.array((T, T), np.float32)      # A[rows of this block, k0:k0+T]
        b_tile = cuda.shared.array((T, T), np.float32)      # B[k0:k0+T, columns of this block]
        acc = np.float32(0.0)
        for k0 in range(0, a.shape[1], T):
            a_tile[ty, tx] = a[row, k0 + tx]                # one load of each tile per thread ...
            b_tile[ty, tx] = b[k0 + ty, col]
            loads[row, col] += 2
            cuda.syncthreads()                              # ... and the whole tile is there
            for k in range(T):
                acc += a_tile[ty, k] * b_tile[k, tx]        # T multiply-adds from shared memory
            cuda.syncthreads()                              # all done before the tiles are overwritten
        c[row, col] = acc

    return matmul_tiled


T = 8
c_tiled, loads_tiled = run(make_tiled(T), a, b, (T, T))
print(cuda_source("matmul_forward_v2"))

# %% CHECK
mt.assert_close(c_tiled, matmul_forward_ref(a, b), name=f"tiled kernel (T = {T}) vs NumPy")
assert (loads_tiled == 2 * K // T).all(), \
    f"tiled: each output costs 2K/T = {2 * K // T} loads, counted {sorted(set(loads_tiled.ravel()))}"

# %% [markdown]
# ### What the tile buys
#
# Every multiply-add needs two numbers. Naive, both come from global memory (4
# bytes each in fp32): 2 FLOPs per 8 bytes. Tiled, a global load feeds T
# multiply-adds, so the kernel does T/4 FLOPs per byte it loads. A GPU is
# bandwidth-bound below its FLOP rate divided by its memory bandwidth; for an
# H100 SXM, about 67 TFLOP/s of fp32 over 3.35 TB/s of HBM, 20 FLOPs a byte. (The
# caches catch much of the naive kernel's repeated loads, so real traffic is
# below our count; the count is of load *instructions*, and each one costs.)
# That is why the library's v2 uses T = 32, and v3 (`register_tiled`) goes
# further: each thread keeps an 8 × 8 block of C in registers, so a value read
# from shared memory feeds 8 multiply-adds too. We measure the count for several
# T with the same kernel factory. (T = 1 would be the naive count again; small
# tiles mean many blocks, and the simulator pays dearly for each block.)

# %%
tiles = [4, 8, 16]
per_output = []
for tile in tiles:
    c_t, loads_t = run(make_tiled(tile), a, b, (tile, tile))
    mt.assert_close(c_t, matmul_forward_ref(a, b), name=f"tiled kernel (T = {tile}) vs NumPy")
    per_output.append(loads_t.mean())

fig, ax = plt.subplots(figsize=(5.5, 3.5))
ax.loglog(tiles, per_output, "o", base=2, label="counted in the tiled kernel")
ax.loglog(tiles, [2 * K / t for t in tiles], "k--", base=2, label="2K/T")
ax.axhline(2 * K, color="C3", lw=1, label="naive: 2K")
ax.set_xlabel("tile size T")
ax.set_ylabel("global loads per output element")
ax.set_title(f"C = A B, K = {K}")
ax.legend()
show(fig, "17_loads_per_output")
print("loads per output:", dict(zip(tiles, per_output)))

# %% CHECK
assert per_output == [2 * K / t for t in tiles], f"loads per output must be 2K/T: {per_output}"

# %% [markdown]
# ## 3. Tensor cores: a warp multiplies tiles
#
# Since Volta, an NVIDIA GPU has **tensor cores**: units that multiply small
# matrix tiles in one instruction. The one the library's v4 uses is PTX
# `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`: a **warp** of 32 threads
# computes D = A B + C for A 16 × 16 (fp16), B 16 × 8 (fp16), C and D 16 × 8
# (fp32). No thread holds a whole tile: each lane holds a **fragment**, in
# registers, at positions the PTX ISA fixes. With groupID = lane / 4 and
# tig = lane % 4 (thread in group):
#
# | operand | per lane | element i sits at |
# | --- | --- | --- |
# | A (16 × 16) | 8 halves (4 registers of fp16 × 2) | row = groupID + 8·(i/2 mod 2), col = 2·tig + i mod 2 + 8·(i ≥ 4) |
# | B (16 × 8) | 4 halves (2 registers) | k = 2·tig + i mod 2 + 8·(i ≥ 2), col = groupID |
# | C, D (16 × 8) | 4 floats | row = groupID + 8·(i ≥ 2), col = 2·tig + i mod 2 |
#
# We write these positions once in plain Python, check that each maps the 32
# lanes' elements onto its tile exactly once, and compile the same functions as
# device functions for the kernel (STYLE.md §3: write the index helper once).

# %%
def a_position(lane, i):
    """(row, k) in the 16 x 16 A tile of fragment element i (0..7) of `lane`."""
    group, tig = lane >> 2, lane & 3
    return group + 8 * ((i >> 1) & 1), 2 * tig + (i & 1) + 8 * (i >> 2)


def b_position(lane, i):
    """(k, col) in the 16 x 8 B tile of fragment element i (0..3) of `lane`."""
    group, tig = lane >> 2, lane & 3
    return 2 * tig + (i & 1) + 8 * (i >> 1), group


def c_position(lane, i):
    """(row, col) in the 16 x 8 accumulator tile of fragment element i (0..3) of `lane`."""
    group, tig = lane >> 2, lane & 3
    return group + 8 * (i >> 1), 2 * tig + (i & 1)


def a_owner(row, k):
    """(lane, i) holding A[row, k]: the inverse of a_position."""
    return 4 * (row & 7) + ((k & 7) >> 1), (k & 1) + 2 * (row >> 3) + 4 * (k >> 3)


def b_owner(k, col):
    """(lane, i) holding B[k, col]: the inverse of b_position."""
    return 4 * col + ((k & 7) >> 1), (k & 1) + 2 * (k >> 3)


def covers(position, per_lane, shape):
    """The cells that position(lane, i) reaches, each counted: all ones means the fragments tile the matrix."""
    seen = np.zeros(shape, dtype=int)
    for lane in range(32):
        for i in range(per_lane):
            seen[position(lane, i)] += 1
    return seen


print(cuda_source("mma_16816"))

# %% CHECK
for name, position, per_lane, shape in (("A", a_position, 8, (16, 16)), ("B", b_position, 4, (16, 8)),
                                        ("C", c_position, 4, (16, 8))):
    assert (covers(position, per_lane, shape) == 1).all(), f"the {name} fragments must cover the tile exactly once"
assert all(a_owner(*a_position(lane, i)) == (lane, i) for lane in range(32) for i in range(8)), "a_owner inverts"
assert all(b_owner(*b_position(lane, i)) == (lane, i) for lane in range(32) for i in range(4)), "b_owner inverts"

# %% [markdown]
# ### The warp's product, emulated
#
# One block is one warp and owns a 16 × 8 tile of C. Each k-step of 16, every lane
# loads its fragments (in cuda.cu v4, `ldmatrix` does this from shared memory), and
# then `mma.sync` computes with all 32 lanes' registers at once. Python has no
# tensor core, so we emulate the instruction: the warp's fragments go to a shared
# array indexed (lane, element), the "register file", and each lane computes
# its own 4 accumulator entries by finding every A and B element it needs in
# whichever lane holds it (a_owner, b_owner). The arithmetic is the tensor core's:
# fp16 inputs, products exact in fp32 (11-bit × 11-bit significands fit in 24
# bits), sums in fp32. So the result should match NumPy's product of the
# **fp16-rounded** inputs to fp32 rounding, and differ from the fp32 inputs'
# product by the fp16 rounding of the inputs.

# %%
device = cuda.jit(device=True)
a_position_d, b_position_d, c_position_d = device(a_position), device(b_position), device(c_position)
a_owner_d, b_owner_d = device(a_owner), device(b_owner)


@cuda.jit
def matmul_mma(c, a, b):
    lane = cuda.threadIdx.x                                 # one block = one warp of 32 lanes
    m0, n0 = cuda.blockIdx.y * 16, cuda.blockIdx.x * 8      # this warp's 16 x 8 tile of C
    a_regs = cuda.shared.array((32, 8), np.float16)         # every lane's A fragment: (lane, element)
    b_regs = cuda.shared.array((32, 4), np.float16)
    acc = cuda.local.array(4, np.float32)                   # this lane's C fragment
    for i in range(4):
        acc[i] = 0.0
    for k0 in range(0, a.shape[1], 16):
        for i in range(8):
            r, k = a_position_d(lane, i)
            a_regs[lane, i] = a[m0 + r, k0 + k]
        for i in range(4):
            k, n = b_position_d(lane, i)
            b_regs[lane, i] = b[k0 + k, n0 + n]
        cuda.syncthreads()                                  # mma.sync: the warp's fragments meet
        for i in range(4):
            r, n = c_position_d(lane, i)
            for k in range(16):
                la, ia = a_owner_d(r, k)
                lb, ib = b_owner_d(k, n)
                acc[i] += np.float32(a_regs[la, ia]) * np.float32(b_regs[lb, ib])   # fp16 x fp16, fp32 sum
        cuda.syncthreads()                                  # fragments used up before the next k-step
    for i in range(4):
        r, n = c_position_d(lane, i)
        c[m0 + r, n0 + n] = acc[i]


Mt, Kt, Nt = (32, 32, 16) if FAST else (64, 64, 32)         # multiples of the 16 x 16 x 8 shapes
a32 = rng.standard_normal((Mt, Kt)).astype(np.float32)
b32 = rng.standard_normal((Kt, Nt)).astype(np.float32)
a16, b16 = a32.astype(np.float16), b32.astype(np.float16)
c_mma = np.zeros((Mt, Nt), dtype=np.float32)
matmul_mma[(Nt // 8, Mt // 16), 32](c_mma, a16, b16)
from_fp16 = matmul_forward_ref(a16.astype(np.float64), b16.astype(np.float64))   # exact inputs, float64 sums
gap_fp16 = float(np.abs(c_mma - from_fp16).max())
gap_fp32 = float(np.abs(c_mma - matmul_forward_ref(a32.astype(np.float64), b32.astype(np.float64))).max())
print(f"largest difference from the product of the fp16 inputs {gap_fp16:.1e}, of the fp32 inputs {gap_fp32:.1e}")

# %% CHECK
mt.assert_close(c_mma, from_fp16, name="emulated mma vs NumPy on the fp16 inputs", atol=1e-5, rtol=1e-6)
assert gap_fp32 > 30 * gap_fp16, "rounding the inputs to fp16 costs far more than the fp32 accumulation"

# %% [markdown]
# In cuda.cu v4 the same instruction sits inside everything sections 1-2 built:
# a 128 × 128 block tile in shared memory (copied with `cp.async`, double
# buffered so the next tile loads while this one is multiplied), 8 warps each
# owning 64 × 32 of it, `ldmatrix` moving fragments from shared memory to
# registers, and the accumulator fragments written to C at `c_position`.
#
# ## 4. Timings, on a GPU
#
# On a GPU we time the library's CUDA C versions (`cupy_launch.VERSIONS`) against
# cuBLAS (`cupy.matmul`, the unit of measurement), after checking each against
# the fp32 product. On the simulator there is nothing meaningful to time.

# %%
if ON_GPU:
    import cupy as cp
    from cupyx.profiler import benchmark

    from minitensor.kernels.matmul_forward import cupy_launch

    n = 2048 if FAST else 4096
    a_gpu = cp.asarray(rng.standard_normal((n, n)), dtype=cp.float32)
    b_gpu = cp.asarray(rng.standard_normal((n, n)), dtype=cp.float32)
    expected = cp.matmul(a_gpu, b_gpu)
    for name in ("naive", "smem_tiled", "register_tiled", "tensor_core_fp16", "cublas"):
        half = name == "tensor_core_fp16"
        args = (a_gpu.astype(cp.float16), b_gpu.astype(cp.float16)) if half else (a_gpu, b_gpu)
        launch = cupy_launch.VERSIONS[cupy_launch.NAMES[name]]
        error = float(cp.abs(launch(*args).astype(cp.float32) - expected).max() / cp.abs(expected).max())
        assert error < (2e-2 if half else 1e-4), f"{name}: relative error {error:.1e}"
        seconds = float(benchmark(launch, args, n_warmup=2, n_repeat=10).gpu_times.mean())
        print(f"{name:18s} {2 * n ** 3 / seconds / 1e12:7.1f} TFLOP/s   (n = {n}, max error {error:.0e})")
else:
    print("no GPU: timings skipped (the simulator runs each thread as a Python thread; its times mean nothing)")

# %% [markdown]
# ## Summary
# - Naive: one thread per output, 2K global loads each. Tiled: a block stages T × T tiles in shared memory, 2K/T loads each, so every load feeds T multiply-adds; the counter in the kernel checks it.
# - Tensor cores: a warp computes 16 × 16 by 16 × 8 in one `mma.sync`, each lane holding a fixed fragment; fp16 inputs, exact fp16 products, fp32 sums.
# - Every version is checked against NumPy; speed is measured only on a GPU, never on the simulator.
#
# ## Exercises
# 1. **Predict, then run.** With T = 4 on the 16 × 16 × 16 product, how many global loads does each thread of
#    the tiled kernel issue, and how many times in all is each element of A loaded (naive, then tiled)?
#    (Answer key: `PREDICT` in `chapters/solutions/17_a_gpu_kernel_step_by_step.py`.)
# 2. Write `matmul_any_size(a, b, tile)`: the tiled kernel for any M, N, K (the last tiles run past the
#    matrices: load zeros there, and write only the outputs that exist), launched with numba.cuda; return C.
#    `check_any_size(fn)` runs it on shapes that are not multiples of the tile.
# 3. Write `c_owner(row, col)`, the inverse of `c_position`: which (lane, i) holds C[row, col] after the
#    `mma`. `check_c_owner(fn)` tests every cell.

# %%
class DeviceOnly(np.ndarray):
    """An input the exercise must hand to its kernel: a product of it on the host (x @ y, np.dot) is refused."""

    HOST_PRODUCTS = {np.matmul, np.dot, np.einsum, np.inner, np.tensordot, np.vdot, np.outer, np.linalg.multi_dot}

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if ufunc in self.HOST_PRODUCTS:
            raise AssertionError("the product was computed on the host (x @ y): launch the tiled kernel instead")
        plain = [np.asarray(a) if isinstance(a, DeviceOnly) else a for a in inputs]
        return getattr(ufunc, method)(*plain, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if func in self.HOST_PRODUCTS:
            raise AssertionError(f"the product was computed on the host (np.{func.__name__}): launch the tiled kernel")
        return super().__array_function__(func, types, args, kwargs)


def check_any_size(matmul_any_size) -> None:
    """Exercise 2: shapes that leave partial tiles in every direction, computed by a kernel, not on the host."""
    check_rng = np.random.default_rng(17)
    for (m, k, n), tile in (((5, 7, 3), 4), ((9, 4, 10), 4), ((3, 11, 6), 8)):
        x = check_rng.standard_normal((m, k)).astype(np.float32)
        y = check_rng.standard_normal((k, n)).astype(np.float32)
        got = np.asarray(matmul_any_size(x.view(DeviceOnly), y.view(DeviceOnly), tile))
        mt.assert_close(got, matmul_forward_ref(x, y), name=f"({m}, {k}) @ ({k}, {n}) with tile {tile}")


def check_c_owner(c_owner) -> None:
    """Exercise 3: c_owner(c_position(lane, i)) == (lane, i) for every lane and element; inverted by hand, not
    by searching c_position's lanes."""
    for lane in range(32):
        for i in range(4):
            row, col = c_position(lane, i)
            with calls_to(c_position) as calls:
                got = tuple(c_owner(row, col))
            assert not calls, "invert the layout's formula: the answer searched c_position's lanes"
            assert got == (lane, i), f"C{c_position(lane, i)} is held by lane {lane}, element {i}; got {got}"


# %% CHECK the checks: a wrong answer must fail them
def _drops_the_last_partial_tile(x, y, tile):                 # loops over whole tiles of k only
    whole = x.shape[1] // tile * tile
    return x[:, :whole] @ y[:whole]


assert fails(check_any_size, _drops_the_last_partial_tile), "check_any_size accepted a product missing k's tail"
assert fails(check_any_size, lambda x, y, tile: x @ y), "check_any_size accepted the product computed on the host"
assert fails(check_any_size, lambda x, y, tile: np.dot(x, y)), "check_any_size accepted np.dot on the host"
assert fails(check_c_owner, lambda row, col: (4 * (row & 7) + col // 2, (col & 1) + 2 * (row >> 3) + 1)), \
    "check_c_owner accepted a wrong element index"
assert fails(check_c_owner, lambda row, col: next((lane, i) for lane in range(32) for i in range(4)
                                                  if c_position(lane, i) == (row, col))), \
    "check_c_owner accepted a search of c_position"

# %%
finish("17_a_gpu_kernel_step_by_step", {check_any_size: "matmul_any_size", check_c_owner: "c_owner"})
