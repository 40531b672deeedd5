/* How a program uses its OpenMP threads: an LD_PRELOAD library that counts the parallel regions
 * libgomp forks (GOMP_parallel, which `#pragma omp parallel` compiles to) and the wall time the
 * forking thread spends inside them, and prints both when the program exits. Time outside every
 * region is time when only one thread works.
 *
 *   gcc -O2 -shared -fPIC bench/omp_regions.c -o /tmp/omp_regions.so -ldl
 *   LD_PRELOAD=/tmp/omp_regions.so build/attn train ... --max-iters 100 --threads 2
 *   LD_PRELOAD=/tmp/omp_regions.so build/attn train ... --max-iters 400 --threads 2
 *
 * The difference of two runs of different lengths gives the figures per step, without the start-up
 * (BENCHMARKS.md, "Element-wise work and threads"). A region that a thread forks from inside
 * one it forked itself is counted but not timed again; work-sharing constructs inside an existing
 * region (an orphaned `for`, a barrier) fork nothing and are not counted. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

typedef void (*gomp_parallel_fn)(void (*)(void*), void*, unsigned, unsigned);

static atomic_long regions;
static atomic_long inside_ns;
static _Thread_local int depth;

static long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) {
  static gomp_parallel_fn real;
  if (!real) real = (gomp_parallel_fn)dlsym(RTLD_NEXT, "GOMP_parallel");
  atomic_fetch_add(&regions, 1);
  if (depth++ > 0) {
    real(fn, data, num_threads, flags);
    --depth;
    return;
  }
  const long t0 = now_ns();
  real(fn, data, num_threads, flags);
  atomic_fetch_add(&inside_ns, now_ns() - t0);
  --depth;
}

__attribute__((destructor)) static void report(void) {
  fprintf(stderr, "omp_regions: %ld parallel regions, %.3f s inside them\n", atomic_load(&regions),
          atomic_load(&inside_ns) * 1e-9);
}
