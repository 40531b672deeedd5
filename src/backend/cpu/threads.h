// attn's thread count, process-wide (attn::set_num_threads / get_num_threads, like torch's).
//
// OpenMP's omp_set_num_threads sets the count of the calling thread only: a thread started later
// (a Python thread, a std::thread) would use the default again. So attn keeps its own count and
// every parallel region asks for num_threads() explicitly. OpenBLAS's count is process-wide state
// too: BlasSingleThread keeps it at one while any sgemm of attn is in flight on any thread.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace attn::kernels {

// The count set by set_num_threads, or until then the same for every thread: the first number of
// OMP_NUM_THREADS, or the cores this process may run on (read once).
int num_threads();
// Sets num_threads() for every thread (and OpenMP's and OpenBLAS's counts). n >= 1.
void set_num_threads(int n);

// The threads for a parallel region over `elems` elements of light work (a pass of a few flops
// each): num_threads(), or 1 below `min_elems`, where waking another thread costs more than it
// saves.
inline constexpr int64_t kParallelElems = int64_t(1) << 16;
inline int threads_for(int64_t elems, int64_t min_elems = kParallelElems) {
  return elems >= min_elems ? num_threads() : 1;
}

// Thread t's share of [0, n) among nt threads: contiguous and nearly equal, in whole multiples of
// `unit` (a vector or a micro-kernel tile; the last share ends at n). Some shares are empty when
// there are fewer units than threads.
inline std::pair<int64_t, int64_t> thread_share(int64_t n, int t, int nt, int64_t unit = 1) {
  const int64_t units = (n + unit - 1) / unit;
  return {std::min(n, units * t / nt * unit), std::min(n, units * (t + 1) / nt * unit)};
}

// Runs body(i0, i1) over [0, n) split into `nt` contiguous, nearly equal ranges (thread_share), one
// per thread of one parallel region (inline when nt <= 1 or n < 2).
template <typename F>
void parallel_ranges(int64_t n, int nt, F&& body) {
  if (nt <= 1 || n < 2) {
    body(int64_t(0), n);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const auto [i0, i1] = thread_share(n, omp_get_thread_num(), omp_get_num_threads());
    body(i0, i1);
  }
}

// While alive, OpenBLAS runs single-threaded (attn splits products across its own threads, see
// gemm.h); the count is restored when the last one on any thread goes.
class BlasSingleThread {
 public:
  BlasSingleThread();
  ~BlasSingleThread();
  BlasSingleThread(const BlasSingleThread&) = delete;
  BlasSingleThread& operator=(const BlasSingleThread&) = delete;
};

}  // namespace attn::kernels
