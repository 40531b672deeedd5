// A host emulation of the CUDA device features the attention kernels (src/kernels/cuda) use, so
// that their index arithmetic, fragment bookkeeping, tiling, masking and pipelines can be checked
// on a machine without a GPU (tests/cuda/emulate/run.sh).
//
// Every GPU thread is an OS thread; __syncthreads is a block-wide std::barrier; warp collectives
// (shuffles, ldmatrix, mma.sync) exchange through per-warp slots between two warp barriers, so a
// lane that skips a collective its warp executes deadlocks the run instead of passing. Blocks run
// one after the other, their shared memory filled with 0xff (NaN) first. cp.async copies at once
// (so races between copies and reads are NOT checked here), and mma accumulates in fp32 in its
// own order. The fragment layouts are those of the PTX ISA ("Matrix Fragments for
// mma.m16n8k16 with floating point type", "ldmatrix"): this file is the second, independent
// statement of them that the kernels are checked against; a misreading shared by both would pass.
#pragma once
#include <cuda_runtime_api.h>
#include <vector_functions.h>

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
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
inline unsigned char* emu_smem() { return emu_smem_ptr; }

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
inline void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
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
inline void cp_async_16(void* smem, const void* gmem, int n) {
  std::memset(smem, 0, 16);
  std::memcpy(smem, gmem, size_t(n));
}
inline void cp_async_4(void* smem, const void* gmem, int n) {
  std::memset(smem, 0, 4);
  std::memcpy(smem, gmem, size_t(n));
}
inline void cp_async_commit() {}
template <int N>
inline void cp_async_wait() {}

template <class K>
cudaError_t cudaFuncSetAttribute(K*, cudaFuncAttribute, int) {
  return cudaSuccess;
}

template <class K, class P>
void emu_launch(K kernel, dim3 grid, int threads, int smem, const P& params) {
  static std::vector<unsigned char> buf(256 * 1024 + 64);
  emu_smem_ptr = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(buf.data()) + 15) &
                                                  ~uintptr_t(15));
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        std::memset(emu_smem_ptr, 0xff, size_t(smem));  // NaN: reads of unwritten smem show
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
      }
}
