// A host emulation of the CUDA device features the attention kernels (src/backend/cuda) use, so
// that their index arithmetic, fragment bookkeeping, tiling, masking and pipelines can be checked
// on a machine without a GPU (tests/cuda/emulate/run.sh).
//
// Every GPU thread is an OS thread; __syncthreads is a block-wide std::barrier; warp collectives
// (shuffles, ldmatrix, mma.sync) exchange through per-warp slots between two warp barriers, so a
// lane that skips a collective its warp executes deadlocks the run instead of passing. Blocks run
// one after the other, their shared memory filled with 0xff (NaN) first. cp.async lands at once
// or, with ATTN_EMU_CP_ASYNC=late, only at the wait_group that retires it (the two extremes a GPU
// may show; races are checked no further than that), and mma accumulates in fp32 in its own
// order. The fragment layouts are those of the PTX ISA ("Matrix Fragments for
// mma.m16n8k16 with floating point type", "ldmatrix"): this file is the second, independent
// statement of them that the kernels are checked against; a misreading shared by both would pass.
//
// Faults a GPU would stop a kernel for are checked: cp.async and ldmatrix addresses misaligned or
// outside the launch's dynamic shared memory, stores past its end (a canary after it), and
// (runtime.cpp, before each launch) kernel arguments that are not device memory over their whole
// extent. run.sh adds UBSan's alignment check for the kernels' plain vector loads and stores.
#pragma once
#include <cuda_runtime_api.h>
#include <vector_functions.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

template <class A, class B>
inline std::common_type_t<A, B> min(A a, B b) {
  return a < b ? a : b;
}
template <class A, class B>
inline std::common_type_t<A, B> max(A a, B b) {
  return a < b ? b : a;
}

// ---- 16-bit types
// --------------------------------------------------------------------------------
struct __half {
  uint16_t x;
};
struct __nv_bfloat16 {
  uint16_t x;
};
inline uint16_t emu_f2bf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return uint16_t(x >> 16);
}
inline float emu_bf2f(uint16_t h) {
  uint32_t x = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
inline uint16_t emu_f2h(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return uint16_t(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);
  if (a < 0x38800000u) {
    if (a <= 0x33000000u) return uint16_t(sign);
    const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  const uint32_t rb = a - 0x38000000u;
  uint32_t h = rb >> 13;
  const uint32_t rem = rb & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return uint16_t(sign | h);
}
inline float emu_h2f(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float f;
  if (e == 0) {
    f = std::ldexp(float(m), -24);
    return sign ? -f : f;
  }
  const uint32_t x =
      e == 31 ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e + 112) << 23) | (m << 13));
  std::memcpy(&f, &x, 4);
  return f;
}
inline float __half2float(__half h) { return emu_h2f(h.x); }
inline __half __ushort_as_half(uint16_t b) { return {b}; }
inline uint16_t __half_as_ushort(__half h) { return h.x; }
inline __half __float2half_rn(float f) { return {emu_f2h(f)}; }
inline float __bfloat162float(__nv_bfloat16 h) { return emu_bf2f(h.x); }
inline __nv_bfloat16 __ushort_as_bfloat16(uint16_t b) { return {b}; }
inline uint16_t __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {emu_f2bf(f)}; }
inline float emu_to_float(uint16_t b, __half*) { return emu_h2f(b); }
inline float emu_to_float(uint16_t b, __nv_bfloat16*) { return emu_bf2f(b); }

// ---- threads, blocks, warps
// ----------------------------------------------------------------------
struct EmuWarp {
  std::barrier<> bar{32};
  uint32_t slot[32][8];
  const void* addr[32];
  float f[32];
};
struct EmuBlock {
  std::barrier<> bar;
  std::vector<std::unique_ptr<EmuWarp>> warps;
  explicit EmuBlock(int threads) : bar(threads) {
    for (int w = 0; w < threads / 32; ++w) warps.push_back(std::make_unique<EmuWarp>());
  }
};
inline thread_local dim3 threadIdx, blockIdx;
inline thread_local EmuBlock* emu_block = nullptr;
inline thread_local int emu_lane = 0, emu_warp = 0;
inline unsigned char* emu_smem_ptr = nullptr;
inline int emu_smem_bytes = 0;  // the launch's dynamic shared memory
inline unsigned char* emu_smem() { return emu_smem_ptr; }

// A fault a GPU would stop the kernel for (misaligned address, shared memory out of bounds): the
// first is printed, and the launch fails with cudaErrorIllegalAddress after the block (the
// emulated thread itself goes on, harmlessly on the host).
inline std::atomic<bool> emu_faulted{false};
inline void emu_fault(const char* what, const void* p, bool in_thread = true) {
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  if (emu_faulted.exchange(true)) return;
  std::fprintf(stderr, "emulated kernel fault: %s at %p (block %u,%u,%u", what, p, blockIdx.x,
               blockIdx.y, blockIdx.z);
  if (in_thread) std::fprintf(stderr, " thread %u", threadIdx.x);
  std::fprintf(stderr, ")\n");
}
inline bool emu_aligned(const void* p, std::size_t a) {
  return reinterpret_cast<std::uintptr_t>(p) % a == 0;
}
// [p, p + n) inside the launch's dynamic shared memory.
inline void emu_check_smem(const void* p, std::size_t n, const char* what) {
  const auto* c = static_cast<const unsigned char*>(p);
  if (c < emu_smem_ptr || c + n > emu_smem_ptr + emu_smem_bytes) emu_fault(what, p);
}

inline void __syncthreads() { emu_block->bar.arrive_and_wait(); }
inline EmuWarp& emu_w() { return *emu_block->warps[emu_warp]; }
inline float __shfl_xor_sync(unsigned, float x, int m) {
  EmuWarp& w = emu_w();
  w.f[emu_lane] = x;
  w.bar.arrive_and_wait();
  const float y = w.f[emu_lane ^ m];
  w.bar.arrive_and_wait();
  return y;
}

// ldmatrix.x4: lanes 8m..8m+7 give the row addresses of matrix m; lane receives, for matrix m,
// (row lane/4, cols 2(lane%4), +1); .trans: (stored rows 2(lane%4), +1, stored col lane/4).
// Each lane's row address: 16 bytes of shared memory, 16-byte aligned.
inline void emu_check_ldmatrix(const void* p) {
  if (!emu_aligned(p, 16)) emu_fault("ldmatrix: row address not 16-byte aligned", p);
  emu_check_smem(p, 16, "ldmatrix: row outside the dynamic shared memory");
}
inline void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  emu_check_ldmatrix(p);
  EmuWarp& w = emu_w();
  w.addr[emu_lane] = p;
  w.bar.arrive_and_wait();
  const int l = emu_lane;
  for (int m = 0; m < 4; ++m) {
    const uint16_t* row = static_cast<const uint16_t*>(w.addr[m * 8 + l / 4]);
    r[m] = uint32_t(row[2 * (l % 4)]) | (uint32_t(row[2 * (l % 4) + 1]) << 16);
  }
  w.bar.arrive_and_wait();
}
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  emu_check_ldmatrix(p);
  EmuWarp& w = emu_w();
  w.addr[emu_lane] = p;
  w.bar.arrive_and_wait();
  const int l = emu_lane;
  for (int m = 0; m < 4; ++m) {
    const uint16_t* r0 = static_cast<const uint16_t*>(w.addr[m * 8 + 2 * (l % 4)]);
    const uint16_t* r1 = static_cast<const uint16_t*>(w.addr[m * 8 + 2 * (l % 4) + 1]);
    r[m] = uint32_t(r0[l / 4]) | (uint32_t(r1[l / 4]) << 16);
  }
  w.bar.arrive_and_wait();
}
// mma.m16n8k16.row.col f32 += T x T: fragment layouts of the PTX ISA.
template <typename T>
inline void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  EmuWarp& w = emu_w();
  for (int i = 0; i < 4; ++i) w.slot[emu_lane][i] = a[i];
  w.slot[emu_lane][4] = b0, w.slot[emu_lane][5] = b1;
  w.bar.arrive_and_wait();
  float A[16][16], B[16][8];
  auto lo = [](uint32_t x) { return emu_to_float(uint16_t(x & 0xffff), (T*)nullptr); };
  auto hi = [](uint32_t x) { return emu_to_float(uint16_t(x >> 16), (T*)nullptr); };
  for (int L = 0; L < 32; ++L) {
    const int g = L / 4, t = L % 4;
    const uint32_t* s = w.slot[L];
    A[g][2 * t] = lo(s[0]), A[g][2 * t + 1] = hi(s[0]);
    A[g + 8][2 * t] = lo(s[1]), A[g + 8][2 * t + 1] = hi(s[1]);
    A[g][2 * t + 8] = lo(s[2]), A[g][2 * t + 9] = hi(s[2]);
    A[g + 8][2 * t + 8] = lo(s[3]), A[g + 8][2 * t + 9] = hi(s[3]);
    B[2 * t][g] = lo(s[4]), B[2 * t + 1][g] = hi(s[4]);
    B[2 * t + 8][g] = lo(s[5]), B[2 * t + 9][g] = hi(s[5]);
  }
  w.bar.arrive_and_wait();
  const int g = emu_lane / 4, t = emu_lane % 4;
  for (int k = 0; k < 16; ++k) {
    d[0] += A[g][k] * B[k][2 * t];
    d[1] += A[g][k] * B[k][2 * t + 1];
    d[2] += A[g + 8][k] * B[k][2 * t];
    d[3] += A[g + 8][k] * B[k][2 * t + 1];
  }
}
// cp.async: `size` bytes (4 or 16) of shared memory, the first n from global memory, the rest
// zeros; both addresses aligned to size. When the copy lands depends on ATTN_EMU_CP_ASYNC:
//   early (default): at once, when issued, so that a copy into a buffer other threads still read
//                    races with them (and shows as wrong results);
//   late:            at the cp.async.wait_group that retires its group (uncommitted copies and
//                    groups never waited for never land), so that a read of a tile before its
//                    wait sees the previous contents (NaN in a fresh block).
// A real GPU lands each copy somewhere in between; run both.
inline const bool emu_cp_async_late = [] {
  const char* m = std::getenv("ATTN_EMU_CP_ASYNC");
  return m && std::strcmp(m, "late") == 0;
}();
struct EmuCopy {
  void* dst;
  const void* src;
  int n, size;
  void run() const {
    std::memset(dst, 0, size_t(size));
    std::memcpy(dst, src, size_t(n));
  }
};
inline thread_local std::vector<EmuCopy> emu_cp_open;                 // not committed yet
inline thread_local std::vector<std::vector<EmuCopy>> emu_cp_groups;  // committed, in order
inline void emu_cp_async(void* smem, const void* gmem, int n, int size) {
  if (!emu_aligned(smem, size_t(size)) || !emu_aligned(gmem, size_t(size)))
    emu_fault(size == 16 ? "cp.async 16: misaligned address" : "cp.async 4: misaligned address",
              emu_aligned(smem, size_t(size)) ? gmem : smem);
  if (n < 0 || n > size) emu_fault("cp.async: src-size out of range", smem);
  emu_check_smem(smem, size_t(size), "cp.async: destination outside the dynamic shared memory");
  const EmuCopy c{smem, gmem, std::clamp(n, 0, size), size};
  if (emu_cp_async_late)
    emu_cp_open.push_back(c);
  else
    c.run();
}
inline void cp_async_16(void* smem, const void* gmem, int n) { emu_cp_async(smem, gmem, n, 16); }
inline void cp_async_4(void* smem, const void* gmem, int n) { emu_cp_async(smem, gmem, n, 4); }
inline void cp_async_commit() {
  if (!emu_cp_async_late) return;
  emu_cp_groups.push_back(std::move(emu_cp_open));
  emu_cp_open.clear();
}
template <int N>
inline void cp_async_wait() {
  if (!emu_cp_async_late) return;
  while (emu_cp_groups.size() > size_t(N)) {
    for (const EmuCopy& c : emu_cp_groups.front()) c.run();
    emu_cp_groups.erase(emu_cp_groups.begin());
  }
}

// The dynamic shared memory each kernel was allowed (cudaFuncAttributeMaxDynamicSharedMemorySize):
// a launch asking for more than 48 KiB without it fails on a GPU.
inline std::mutex emu_attr_mutex;
inline std::map<const void*, int> emu_smem_allowed;
int emu_smem_optin();  // runtime.cpp: the device's cudaDevAttrMaxSharedMemoryPerBlockOptin
template <class K>
cudaError_t cudaFuncSetAttribute(K* kernel, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || value > emu_smem_optin()) return cudaErrorInvalidValue;
    std::lock_guard<std::mutex> lock(emu_attr_mutex);
    emu_smem_allowed[reinterpret_cast<const void*>(kernel)] = value;
  }
  return cudaSuccess;
}
inline int emu_smem_allowed_for(const void* kernel) {
  std::lock_guard<std::mutex> lock(emu_attr_mutex);
  const auto it = emu_smem_allowed.find(kernel);
  return it == emu_smem_allowed.end() ? 48 * 1024 : it->second;
}

// ---- launches
// --------------------------------------------------------------------------------------
// runtime.cpp: whether [p, p + bytes) is device memory of the current device (complains on
// stderr naming kernel and what otherwise), and the error a launch that fails the check leaves.
bool emu_check_device_range(const char* kernel, const char* what, const void* p, std::size_t bytes);
void emu_set_launch_error(cudaError_t e);

// Bytes spanned by a (B, N, L, E) operand with batch, head and row strides (elements): what a
// kernel may read or write from its base pointer.
inline std::size_t emu_extent(int64_t B, int64_t N, int64_t L, int64_t E, int64_t bs, int64_t hs,
                              int64_t rs, int64_t cs, std::size_t elem) {
  if (B <= 0 || N <= 0 || L <= 0 || E <= 0) return 0;
  return std::size_t((B - 1) * bs + (N - 1) * hs + (L - 1) * rs + (E - 1) * cs + 1) * elem;
}

// A GPU faults on a kernel argument that is not device memory (a host pointer, a freed block,
// strides reaching past the tensor): check every pointer of the kernels' parameter block
// (KernelParams in sdpa_cuda_common.cuh) over the extent its sizes and strides give.
template <class P>
bool emu_check_launch(const char* kernel, const P& p) {
  if constexpr (requires {
                  p.q_batch_stride, p.dq_batch_stride, p.Di, p.mask_col_stride,
                      p.key_padding_batch_stride;
                }) {
    const int64_t B = p.B, H = p.H, Hk = p.H_kv, Lq = p.L_q, Lk = p.L_k, D = p.D, Dv = p.D_v;
    auto ok = [&](const char* what, const void* ptr, std::size_t bytes) {
      return !ptr || emu_check_device_range(kernel, what, ptr, bytes);
    };
    bool good = true;
    good &= ok("q", p.q,
               emu_extent(B, H, Lq, D, p.q_batch_stride, p.q_head_stride, p.q_row_stride, 1, 2));
    good &= ok("k", p.k,
               emu_extent(B, Hk, Lk, D, p.k_batch_stride, p.k_head_stride, p.k_row_stride, 1, 2));
    good &= ok("v", p.v,
               emu_extent(B, Hk, Lk, Dv, p.v_batch_stride, p.v_head_stride, p.v_row_stride, 1, 2));
    good &=
        ok("out", p.out,
           emu_extent(B, H, Lq, Dv, p.out_batch_stride, p.out_head_stride, p.out_row_stride, 1, 2));
    good &= ok("lse", p.lse, std::size_t(std::max<int64_t>(B * H * Lq, 0)) * 4);
    const int mask_kind = int(p.mask_kind);  // MaskKind: 0 none, 1 bool (bytes), 2 additive (T)
    if (mask_kind != 0)
      good &= ok("mask", p.mask,
                 emu_extent(B, H, Lq, Lk, p.mask_batch_stride, p.mask_head_stride,
                            p.mask_row_stride, p.mask_col_stride, mask_kind == 1 ? 1 : 2));
    good &= ok("key_padding", p.key_padding,
               emu_extent(B, 1, 1, Lk, p.key_padding_batch_stride, 0, 0, 1, 1));
    good &= ok(
        "dout", p.dout,
        emu_extent(B, H, Lq, Dv, p.dout_batch_stride, p.dout_head_stride, p.dout_row_stride, 1, 2));
    good &= ok("dq", p.dq,
               emu_extent(B, H, Lq, D, p.dq_batch_stride, p.dq_head_stride, p.dq_row_stride, 1, 2));
    good &=
        ok("dk", p.dk,
           emu_extent(B, Hk, Lk, D, p.dk_batch_stride, p.dk_head_stride, p.dk_row_stride, 1, 2));
    good &=
        ok("dv", p.dv,
           emu_extent(B, Hk, Lk, Dv, p.dv_batch_stride, p.dv_head_stride, p.dv_row_stride, 1, 2));
    good &= ok("Di", p.Di, std::size_t(std::max<int64_t>(B * H * Lq, 0)) * 4);
    return good;
  } else {
    static_assert(sizeof(P) == 0, "emu_check_launch: unknown kernel parameter block");
    return false;
  }
}

template <class K, class P>
void emu_launch(K kernel, dim3 grid, int threads, int smem, const P& params) {
  // The dynamic shared memory, then a canary that a store past its end overwrites.
  constexpr int kCanary = 4096;
  static std::vector<unsigned char> buf(256 * 1024 + kCanary + 64);
  emu_smem_ptr = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(buf.data()) + 15) &
                                                  ~uintptr_t(15));
  emu_smem_bytes = smem;
  emu_faulted = false;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        std::memset(emu_smem_ptr, 0xff, size_t(smem));  // NaN: reads of unwritten smem show
        std::memset(emu_smem_ptr + smem, 0xa5, kCanary);
        EmuBlock block(threads);
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; ++t)
          ts.emplace_back([&, t] {
            threadIdx = dim3(unsigned(t), 0, 0);
            blockIdx = dim3(x, y, z);
            emu_block = &block;
            emu_lane = t % 32, emu_warp = t / 32;
            kernel(params);
          });
        for (auto& th : ts) th.join();
        blockIdx = dim3(x, y, z);  // this (launching) thread's, for the message
        for (int i = 0; i < kCanary; ++i)
          if (emu_smem_ptr[smem + i] != 0xa5) {
            emu_fault("a store past the end of the dynamic shared memory", emu_smem_ptr + smem + i,
                      false);
            break;
          }
        if (emu_faulted) return;  // a GPU stops at the fault: emu_launch_checked reports it
      }
}

// The launch configuration a GPU accepts: 1..1024 threads (whole warps here), grid.x >= 1,
// grid.y and grid.z in 1..65535, dynamic shared memory within what cudaFuncSetAttribute allowed
// (48 KiB without it). Complains and returns false otherwise.
inline bool emu_check_config(const char* name, const void* kernel, dim3 grid, int threads,
                             int smem) {
  char why[200] = "";
  const int allowed = emu_smem_allowed_for(kernel);
  if (threads < 1 || threads > 1024 || threads % 32 != 0)
    std::snprintf(why, sizeof why, "%d threads per block", threads);
  else if (grid.x < 1 || grid.y < 1 || grid.z < 1 || grid.y > 65535 || grid.z > 65535)
    std::snprintf(why, sizeof why, "grid (%u, %u, %u)", grid.x, grid.y, grid.z);
  else if (smem < 0 || smem > allowed)
    std::snprintf(why, sizeof why,
                  "%d bytes of dynamic shared memory, %d allowed (cudaFuncSetAttribute)", smem,
                  allowed);
  if (!*why) return true;
  std::fprintf(stderr, "emulated kernel launch: %s: invalid configuration: %s\n", name, why);
  return false;
}

template <class K, class P>
void emu_launch_checked(const char* name, K kernel, dim3 grid, int threads, int smem,
                        const P& params) {
  if (!emu_check_config(name, reinterpret_cast<const void*>(kernel), grid, threads, smem)) {
    emu_set_launch_error(cudaErrorInvalidConfiguration);
    return;
  }
  if (!emu_check_launch(name, params)) {
    emu_set_launch_error(cudaErrorIllegalAddress);
    return;
  }
  // One launch at a time (the shared-memory buffer and the fault flag are global): host threads
  // launching at once see their kernels run one after the other, as on one stream.
  static std::mutex launch_mutex;
  std::lock_guard<std::mutex> lock(launch_mutex);
  emu_launch(kernel, grid, threads, smem, params);
  if (emu_faulted) emu_set_launch_error(cudaErrorIllegalAddress);
}
