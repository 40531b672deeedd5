// attn's process-wide thread count and OpenBLAS's (see threads.h).
#include "threads.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>

extern "C" int openblas_get_num_threads(void);
extern "C" void openblas_set_num_threads(int);

namespace attn::kernels {

namespace {

std::atomic<int> g_threads{0};  // 0: not set

// OpenBLAS's count: blas_users sgemm calls in flight hold it at 1; blas_restore is the count it
// gets back when the last one ends.
std::mutex blas_mutex;
int blas_users = 0;
int blas_restore = 1;

// OpenMP's default for a new thread, read once: the first number of OMP_NUM_THREADS, or the cores
// this process may run on. Not the calling thread's omp_get_max_threads(), which whoever shares
// the OpenMP runtime may have changed on that thread alone: importing PyTorch 1.13 sets the
// importing thread's count to 1 on this 2-core machine, so the main thread and a new Python
// thread had different counts, split their products differently and, where the split changes
// oneDNN's sums (its AVX2 sgemm), got different bits.
int default_threads() {
  static const int n = [] {
    if (const char* s = std::getenv("OMP_NUM_THREADS")) {
      char* end = nullptr;
      const long v = std::strtol(s, &end, 10);
      if (end != s && v > 0 && v < (1 << 16)) return int(v);
    }
    return std::max(1, omp_get_num_procs());
  }();
  return n;
}

}  // namespace

int num_threads() {
  const int n = g_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : default_threads();
}

void set_num_threads(int n) {
  g_threads.store(n, std::memory_order_relaxed);
  omp_set_num_threads(n);
  std::lock_guard<std::mutex> lock(blas_mutex);
  if (blas_users > 0)
    blas_restore = n;
  else
    openblas_set_num_threads(n);
}

BlasSingleThread::BlasSingleThread() {
  std::lock_guard<std::mutex> lock(blas_mutex);
  if (blas_users++ > 0) return;
  blas_restore = openblas_get_num_threads();
  if (blas_restore != 1) openblas_set_num_threads(1);
}

BlasSingleThread::~BlasSingleThread() {
  std::lock_guard<std::mutex> lock(blas_mutex);
  if (--blas_users == 0 && blas_restore != 1) openblas_set_num_threads(blas_restore);
}

}  // namespace attn::kernels
