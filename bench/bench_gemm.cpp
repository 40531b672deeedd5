// Single-precision GEMM side by side: every CPU GEMM library Debian has, on the shapes of a GPT
// training step and of decoding, behind one interface (issue 14: which GEMM should attn use?).
//
//   build/bench/bench_gemm                                       # everything, 1 and 2 threads
//   build/bench/bench_gemm --threads=1                           # one thread only
//   build/bench/bench_gemm --benchmark_filter='train6x384/.*fwd'  # one model's forward products
//   build/bench/bench_gemm --benchmark_filter='decode_M1/' --benchmark_format=json
//   build/bench/bench_gemm --benchmark_filter='nanogpt/qkv.fwd/.*/t1/' --benchmark_min_time=0.01
//
// Each product is row-major C (M, N) = op(A) (M, K) * op(B) (K, N), alpha 1, beta 0, with the
// transposes of a linear layer y = x W^T (W is (out, in)): forward y = x W^T ("NT"), backward
// dX = dY W ("NN") and dW = dY^T X ("TN"). Names: gemm/<set>/<layer>.<pass>/MxNxK_<op>/<lib>/t<n>
// (then /real_time: times are wall-clock). Sets: train6x384, nanogpt, decode_M1, decode_M8.
// Counter: GFLOP (a rate, printed "GFLOP=123.4/s"), 2*M*N*K per product. In the decoding sets B
// takes turns among copies filling 256 MB, so every product reads it from memory, as a decoding
// step reads each weight once; the training sets reuse their operands (they stay in cache).
//
// Libraries (each only when CMake found it; see bench/README.md):
//   openblas  cblas_sgemm with OpenBLAS's own threads (openblas_set_num_threads(n); n = 1 is the
//             plain single-threaded call, and the reference every other result is checked against)
//   attn      attn::kernels::sgemm, what the library calls: oneDNN (OpenBLAS when built without it)
//             single-threaded per piece, split over attn's OpenMP threads; one row, and up to 8
//             against a B of 1 MB or more, K <= 1024: attn's gemm_rows (kernels/cpu/gemm_rows.h)
//   blis      bli_sgemm (BLIS's typed API with row/column strides), bli_thread_set_num_threads(n);
//             dlopened (RTLD_LOCAL) since it exports a cblas_sgemm that would shadow OpenBLAS's
//   onednn    dnnl_sgemm (row-major, 'N'/'T'), OpenMP runtime: omp_set_num_threads(n)
//   libxsmm   JIT kernels from libxsmm_smmdispatch on 64 x 64 tiles of C with the whole K, tiles
//             split over OpenMP threads. libxsmm is column-major: the product is computed as
//             C^T = op(B)^T op(A)^T, and libxsmm 1.17 JITs no transposed first operand, so for
//             op(B) = B^T (the forward) B is first transposed with libxsmm_otrans, inside
//             the timed call (what using it for a layer would cost without keeping W^T around).
// Before the first timed iteration of every (shape, library, threads), the result is compared with
// single-threaded OpenBLAS's; a max abs difference above 1e-6 * K (inputs uniform in [-0.5, 0.5])
// prints both and exits with status 1. Each benchmark first sleeps 0.2 s (other pools go idle).
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "gemm.h"     // attn::kernels::sgemm (src/backend/cpu)
#include "threads.h"  // attn::kernels::set_num_threads

#ifdef ATTN_BENCH_BLIS_HEADER
// By full path: BLIS's directory also holds a cblas.h of its own. Not a system header that way, so
// its warnings are silenced here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wtype-limits"
#include ATTN_BENCH_BLIS_HEADER
#pragma GCC diagnostic pop
#endif
#ifdef ATTN_BENCH_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif
#ifdef ATTN_BENCH_LIBXSMM
#include <libxsmm.h>
#endif

namespace {

// ---- the one interface -----------------------------------------------------------------------

// Row-major C = op(A) op(B), alpha 1, beta 0 (C may hold garbage before).
struct Gemm {
  bool ta, tb;
  int64_t M, N, K;
  const float* A;
  int64_t lda;
  const float* B;
  int64_t ldb;
  float* C;
  int64_t ldc;
};

struct Library {
  const char* name;
  void (*set_threads)(int n);
  void (*run)(const Gemm& g);
};

void openblas_threads(int n) { openblas_set_num_threads(n); }
void openblas_run(const Gemm& g) {
  cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans,
              int(g.M), int(g.N), int(g.K), 1.0f, g.A, int(g.lda), g.B, int(g.ldb), 0.0f, g.C,
              int(g.ldc));
}

void attn_threads(int n) { attn::kernels::set_num_threads(n); }
void attn_run(const Gemm& g) {
  attn::kernels::sgemm(g.ta, g.tb, g.M, g.N, g.K, 1.0f, g.A, g.lda, g.B, g.ldb, 0.0f, g.C, g.ldc);
}

#ifdef ATTN_BENCH_BLIS_HEADER
// BLIS is opened at run time, RTLD_LOCAL: it exports cblas_sgemm and sgemm_ too, and linked like
// the others it could take OpenBLAS's place for every cblas_sgemm call (attn's included).
struct BlisApi {
  decltype(&bli_sgemm) sgemm;
  decltype(&bli_thread_set_num_threads) set_num_threads;
  decltype(&bli_info_get_version_str) version;
  decltype(&bli_info_get_enable_openmp) openmp;
  decltype(&bli_info_get_enable_pthreads) pthreads;
};
std::string blis_error;
const BlisApi* blis() {
  static const BlisApi* api = []() -> const BlisApi* {
    void* h = dlopen(ATTN_BENCH_BLIS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      blis_error = dlerror();
      return nullptr;
    }
    static BlisApi a;
    a.sgemm = reinterpret_cast<decltype(a.sgemm)>(dlsym(h, "bli_sgemm"));
    a.set_num_threads =
        reinterpret_cast<decltype(a.set_num_threads)>(dlsym(h, "bli_thread_set_num_threads"));
    a.version = reinterpret_cast<decltype(a.version)>(dlsym(h, "bli_info_get_version_str"));
    a.openmp = reinterpret_cast<decltype(a.openmp)>(dlsym(h, "bli_info_get_enable_openmp"));
    a.pthreads = reinterpret_cast<decltype(a.pthreads)>(dlsym(h, "bli_info_get_enable_pthreads"));
    if (!a.sgemm || !a.set_num_threads || !a.version || !a.openmp || !a.pthreads) {
      blis_error = std::string(ATTN_BENCH_BLIS_LIBRARY) + " lacks bli_sgemm or bli_info_*";
      return nullptr;
    }
    return &a;
  }();
  return api;
}
void blis_threads(int n) { blis()->set_num_threads(n); }
void blis_run(const Gemm& g) {
  float one = 1.0f, zero = 0.0f;  // row-major: row stride ld, column stride 1
  blis()->sgemm(g.ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
                g.tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, g.M, g.N, g.K, &one,
                const_cast<float*>(g.A), g.lda, 1, const_cast<float*>(g.B), g.ldb, 1, &zero, g.C,
                g.ldc, 1);
}
#endif

#ifdef ATTN_BENCH_ONEDNN
void onednn_threads(int n) { omp_set_num_threads(n); }  // oneDNN asks omp_get_max_threads()
void onednn_run(const Gemm& g) {
  if (dnnl_sgemm(g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', g.M, g.N, g.K, 1.0f, g.A, g.lda, g.B, g.ldb,
                 0.0f, g.C, g.ldc) != dnnl_success) {
    std::fprintf(stderr, "bench_gemm: dnnl_sgemm failed\n");
    std::exit(1);
  }
}
#endif

#ifdef ATTN_BENCH_LIBXSMM
int xsmm_nthreads = 1;
std::vector<float> xsmm_scratch;  // B^T for the forward (see the header comment)
void libxsmm_threads(int n) { xsmm_nthreads = n; }
void libxsmm_run(const Gemm& g) {
  constexpr int64_t kTile = 64;
  // Column-major: C^T (N x M, ld ldc) = P (N x K) * Q (K x M). Q is A's storage read column-major
  // (no transpose when !ta, else libxsmm's transposed-B kernel). P is B's storage read column-major
  // when !tb; when tb, B^T is materialised first (no transposed-A kernels in libxsmm 1.17).
  if (g.tb && xsmm_scratch.size() < size_t(g.N * g.K)) xsmm_scratch.resize(size_t(g.N * g.K));
  const int flags = g.ta ? LIBXSMM_GEMM_FLAG_TRANS_B : 0;
  const int prefetch = LIBXSMM_PREFETCH_NONE;
  const float one = 1.0f, zero = 0.0f;
  const libxsmm_blasint ldq = g.lda, ldc = g.ldc;
  const int64_t tiles_n = (g.N + kTile - 1) / kTile, tiles_m = (g.M + kTile - 1) / kTile;
  const float* p = g.tb ? xsmm_scratch.data() : g.B;
  const libxsmm_blasint ldp = g.tb ? g.N : g.ldb;
  // The kernels for whole tiles and for the edges, JIT-generated once (then looked up).
  libxsmm_smmfunction kernel[2][2];
  for (int em = 0; em < 2; ++em)
    for (int en = 0; en < 2; ++en) {
      const libxsmm_blasint m = em ? (g.N - 1) % kTile + 1 : std::min(kTile, g.N);
      const libxsmm_blasint n = en ? (g.M - 1) % kTile + 1 : std::min(kTile, g.M);
      kernel[em][en] =
          libxsmm_smmdispatch(m, n, g.K, &ldp, &ldq, &ldc, &one, &zero, &flags, &prefetch);
      if (!kernel[em][en]) {
        std::fprintf(stderr, "bench_gemm: libxsmm_smmdispatch gave no kernel for %lldx%lldx%lld\n",
                     (long long)m, (long long)n, (long long)g.K);
        std::exit(1);
      }
    }
#pragma omp parallel num_threads(xsmm_nthreads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    if (g.tb) {  // B (N, K) row-major is (K x N) column-major: out (N x K), ld N, N split
      // (by hand: libxsmm_otrans_thread dies of SIGFPE with 2 threads on 1x2304x768)
      const int64_t c0 = g.N * t / nt, c1 = g.N * (t + 1) / nt;
      if (c1 > c0)
        libxsmm_otrans(xsmm_scratch.data() + c0, g.B + c0 * g.ldb, sizeof(float), g.K, c1 - c0,
                       g.ldb, g.N);
#pragma omp barrier
    }
    // Tiles (i over N, j over M), i outer: one 64-row block of P is reused over all of Q.
#pragma omp for schedule(static)
    for (int64_t tile = 0; tile < tiles_n * tiles_m; ++tile) {
      const int64_t i0 = tile / tiles_m * kTile, j0 = tile % tiles_m * kTile;
      const float* q = g.ta ? g.A + j0 : g.A + j0 * g.lda;
      kernel[i0 + kTile > g.N][j0 + kTile > g.M](p + i0, q, g.C + i0 + j0 * g.ldc);
    }
  }
}
#endif

const std::vector<Library>& libraries() {
  static const std::vector<Library> libs = [] {
    std::vector<Library> v = {{"openblas", openblas_threads, openblas_run},
                              {"attn", attn_threads, attn_run}};
#ifdef ATTN_BENCH_BLIS_HEADER
    if (blis()) v.push_back({"blis", blis_threads, blis_run});
#endif
#ifdef ATTN_BENCH_ONEDNN
    v.push_back({"onednn", onednn_threads, onednn_run});
#endif
#ifdef ATTN_BENCH_LIBXSMM
    v.push_back({"libxsmm", libxsmm_threads, libxsmm_run});
#endif
    return v;
  }();
  return libs;
}

// ---- shapes ----------------------------------------------------------------------------------

struct Shape {
  std::string set, layer;  // e.g. "train6x384", "fc.fwd"
  int64_t M, N, K;
  bool ta, tb;
};

std::string shape_name(const Shape& s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%lldx%lldx%lld_%c%c", (long long)s.M, (long long)s.N,
                (long long)s.K, s.ta ? 'T' : 'N', s.tb ? 'T' : 'N');
  return s.set + "/" + s.layer + "/" + buf;
}

// A linear layer W (out, in) over `tokens` rows: forward y = x W^T, backward dX = dY W, dW = dY^T
// X.
void add_layer(std::vector<Shape>& v, const std::string& set, const std::string& layer,
               int64_t tokens, int64_t out, int64_t in, bool backward) {
  v.push_back({set, layer + ".fwd", tokens, out, in, false, true});
  if (!backward) return;
  v.push_back({set, layer + ".dX", tokens, in, out, false, false});
  v.push_back({set, layer + ".dW", out, in, tokens, true, false});
}

std::vector<Shape> shapes() {
  std::vector<Shape> v;
  // 6 layers x 384 channels, batch 16 x block 256 = 4096 tokens.
  for (auto [layer, out, in] : {std::tuple{"qkv", 1152, 384},
                                {"proj", 384, 384},
                                {"fc", 1536, 384},
                                {"fc_proj", 384, 1536}})
    add_layer(v, "train6x384", layer, 4096, out, in, true);
  // nanoGPT's CPU config: 128 channels, 12 x 64 = 768 tokens, vocabulary 65.
  for (auto [layer, out, in] :
       {std::tuple{"qkv", 384, 128}, {"fc", 512, 128}, {"fc_proj", 128, 512}, {"lm_head", 65, 128}})
    add_layer(v, "nanogpt", layer, 768, out, in, true);
  // Decoding 1 and 8 rows against GPT-2 small's weights.
  for (int64_t rows : {1, 8})
    for (auto [layer, out, in] : {std::tuple{"qkv", 2304, 768},
                                  {"fc", 3072, 768},
                                  {"fc_proj", 768, 3072},
                                  {"lm_head", 50257, 768}})
      add_layer(v, "decode_M" + std::to_string(rows), layer, rows, out, in, false);
  return v;
}

// ---- operands, the reference and the check --------------------------------------------------

// Operands of the last shape used (benchmarks run shape by shape, so each is made once per run)
// and single-threaded OpenBLAS's result, the reference.
struct Operands {
  std::string key;
  std::vector<float> a, b, c, ref;
  // Decoding sets: copies of b filling kColdBytes, used in turn, so that each product reads B from
  // memory as a decoding step does (it reads every weight of the model once); empty otherwise.
  std::vector<std::vector<float>> cold;
  Gemm g{};  // C unset
  Gemm into(float* out) const {
    Gemm r = g;
    r.C = out;
    return r;
  }
};

void fill(std::vector<float>& v, uint32_t seed) {
  uint32_t x = seed;
  for (float& f : v) {  // xorshift32, uniform in [-0.5, 0.5)
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    f = float(x >> 8) / float(1 << 24) - 0.5f;
  }
}

constexpr size_t kColdBytes = size_t(256) << 20;  // several times any CPU's last-level cache

Operands& operands(const Shape& s) {
  static Operands ops;
  const std::string key = shape_name(s);
  if (ops.key == key) return ops;
  ops.key = key;
  ops.a.assign(size_t(s.M * s.K), 0.0f);
  ops.b.assign(size_t(s.K * s.N), 0.0f);
  ops.c.assign(size_t(s.M * s.N), 0.0f);
  ops.ref.assign(size_t(s.M * s.N), 0.0f);
  fill(ops.a, 12345);
  fill(ops.b, 67890);
  // Stored A is (K, M) when transposed, else (M, K); B is (N, K) when transposed, else (K, N).
  ops.g = {
      s.ta,    s.tb, s.M, s.N, s.K, ops.a.data(), s.ta ? s.M : s.K, ops.b.data(), s.tb ? s.K : s.N,
      nullptr, s.N};
  ops.cold.clear();
  if (s.set.rfind("decode", 0) == 0) {
    const size_t bytes = ops.b.size() * sizeof(float);
    ops.cold.assign(std::max<size_t>(2, (kColdBytes + bytes - 1) / bytes), ops.b);
  }
  openblas_set_num_threads(1);
  openblas_run(ops.into(ops.ref.data()));
  return ops;
}

void check(const Shape& s, const Library& lib, int threads, Operands& ops) {
  std::fill(ops.c.begin(), ops.c.end(), std::numeric_limits<float>::quiet_NaN());
  lib.run(ops.into(ops.c.data()));
  const double tol = 1e-6 * double(s.K);
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < ops.c.size(); ++i) {
    const double d = std::fabs(double(ops.c[i]) - double(ops.ref[i]));
    if (!(d <= worst)) {  // NaN too
      worst = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
      at = i;
    }
  }
  if (worst > tol) {
    std::fprintf(stderr,
                 "bench_gemm: %s with %d thread(s) differs from OpenBLAS on %s: max |diff| %g at "
                 "(%zu, %zu): %g vs %g (tolerance %g)\n",
                 lib.name, threads, shape_name(s).c_str(), worst, at / size_t(s.N),
                 at % size_t(s.N), double(ops.c[at]), double(ops.ref[at]), tol);
    std::exit(1);
  }
}

constexpr int kSettleMs = 200;

void bm_gemm(benchmark::State& state, Shape s, Library lib, int threads) {
  Operands& ops = operands(s);
  lib.set_threads(threads);
  // Google Benchmark calls this several times per benchmark (growing the iteration count): the
  // settling and the check happen on the first call only.
  static std::string last;
  const std::string key = shape_name(s) + "/" + lib.name + "/" + std::to_string(threads);
  if (key != last) {
    last = key;
    // Let the previous library's idle threads stop spinning (OpenBLAS's for up to ~0.1 s) before
    // this one runs: each library keeps its own pool.
    std::this_thread::sleep_for(std::chrono::milliseconds(kSettleMs));
    check(s, lib, threads, ops);
  }
  Gemm g = ops.into(ops.c.data());
  size_t turn = 0;
  for (auto _ : state) {
    if (!ops.cold.empty()) {
      g.B = ops.cold[turn].data();
      turn = turn + 1 == ops.cold.size() ? 0 : turn + 1;
    }
    lib.run(g);
    benchmark::DoNotOptimize(ops.c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP"] = benchmark::Counter(2.0 * double(s.M) * double(s.N) * double(s.K) / 1e9,
                                               benchmark::Counter::kIsIterationInvariantRate);
}

// ---- command line and context ----------------------------------------------------------------

// --threads=LIST (comma-separated counts, default "1,2") is ours; the rest goes to Google
// Benchmark.
std::vector<int> take_threads_flag(int& argc, char** argv) {
  std::vector<int> threads = {1, 2};
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) != 0) {
      argv[out++] = argv[i];
      continue;
    }
    threads.clear();
    const char* p = argv[i] + 10;
    while (*p) {
      char* end = nullptr;
      const long n = std::strtol(p, &end, 10);
      if (end == p || n < 1 || n > 1024 || (*end != ',' && *end != '\0')) {
        std::fprintf(stderr,
                     "bench_gemm: --threads wants counts >= 1 separated by commas, e.g. "
                     "--threads=1,2 (got '%s')\n",
                     argv[i] + 10);
        std::exit(2);
      }
      threads.push_back(int(n));
      p = *end == ',' ? end + 1 : end;
    }
    if (threads.empty()) {
      std::fprintf(stderr, "bench_gemm: --threads is empty\n");
      std::exit(2);
    }
  }
  argc = out;
  return threads;
}

// Which file defines a symbol as the program resolves it (BLIS exports a cblas_sgemm too).
std::string provider(const char* symbol) {
  Dl_info info{};
  void* p = dlsym(RTLD_DEFAULT, symbol);
  return p && dladdr(p, &info) && info.dli_fname ? info.dli_fname : "?";
}

void add_context() {
  std::string names;
  for (const Library& lib : libraries()) names += std::string(names.empty() ? "" : ",") + lib.name;
  benchmark::AddCustomContext("libraries", names);
  benchmark::AddCustomContext("openblas", openblas_get_config());
  const std::string cblas = provider("cblas_sgemm");
  benchmark::AddCustomContext("cblas_sgemm_from", cblas);
  if (cblas.find("openblas") == std::string::npos) {
    std::fprintf(stderr, "bench_gemm: cblas_sgemm resolves to %s, not OpenBLAS (link order)\n",
                 cblas.c_str());
    std::exit(1);
  }
#ifdef ATTN_BENCH_BLIS_HEADER
  if (const BlisApi* b = blis())
    benchmark::AddCustomContext(
        "blis", std::string(b->version()) + (b->openmp()     ? " openmp"
                                             : b->pthreads() ? " pthreads"
                                                             : " single-threaded build"));
  else
    benchmark::AddCustomContext("blis", "not loaded: " + blis_error);
#endif
#ifdef ATTN_BENCH_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  benchmark::AddCustomContext("onednn", std::to_string(v->major) + "." + std::to_string(v->minor) +
                                            "." + std::to_string(v->patch));
#endif
#ifdef ATTN_BENCH_LIBXSMM
  benchmark::AddCustomContext("libxsmm", LIBXSMM_VERSION);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<int> threads = take_threads_flag(argc, argv);
#ifdef ATTN_BENCH_LIBXSMM
  libxsmm_init();
#endif
  add_context();
  // Thread count outermost, then shape, then library: the libraries run side by side per shape,
  // and the operands are made once per shape and thread count.
  for (int t : threads)
    for (const Shape& s : shapes())
      for (const Library& lib : libraries())
        benchmark::RegisterBenchmark(
            ("gemm/" + shape_name(s) + "/" + lib.name + "/t" + std::to_string(t)).c_str(), bm_gemm,
            s, lib, t)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
#ifdef ATTN_BENCH_LIBXSMM
  libxsmm_finalize();
#endif
  return 0;
}
