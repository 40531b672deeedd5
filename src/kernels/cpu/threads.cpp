// attn's process-wide thread count and OpenBLAS's (see threads.h).
#include "threads.h"

#include <omp.h>

#include <atomic>
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

}  // namespace

int num_threads() {
  const int n = g_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : omp_get_max_threads();
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
