// Google Benchmark harness for attn's attention kernels, with OpenBLAS sgemm 1024^3 as the anchor.
//
//   build/bench/bench_attention                        # everything, 2 threads
//   build/bench/bench_attention --threads=1            # attn and OpenBLAS on 1 thread
//   build/bench/bench_attention --benchmark_filter='fwd/fused.*L1024'
//
// Counter: GFLOP (a rate, printed "GFLOP=123.4/s") with attention FLOPs counted as in DESIGN.md
// ("Performance habits"):
//   forward  = 4 * B * H * L_q * L_k * D   (half of it when causal)
//   backward = 2.5 x forward, forward+backward = 3.5 x forward.
// Kernels: "reference" (SdpaBackend::Reference, the naive kernel) and "fused" (SdpaBackend::Fused
// when the enum has it, else SdpaBackend::Auto, reported as "auto"). Forward+backward and backward
// runs are registered only when scaled_dot_product_attention_forward/_backward are linked into
// libattn (probed through weak references, so this file builds before and after they land).
// These are figures, not tests: bench/compare.py times attn against PyTorch in the same run.
#include <attn/attn.h>
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// Weak re-declarations: null at run time when libattn does not define them yet.
namespace attn {
__attribute__((weak)) SdpaForwardResult scaled_dot_product_attention_forward(const Tensor& q,
                                                                             const Tensor& k,
                                                                             const Tensor& v,
                                                                             const SdpaOptions& o);
__attribute__((weak)) std::tuple<Tensor, Tensor, Tensor> scaled_dot_product_attention_backward(
    const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
    const SdpaForwardResult& forward, const SdpaOptions& o);
}  // namespace attn

namespace {

// SdpaBackend::Fused once the fused kernel declares it; Auto before.
template <class E>
constexpr bool has_fused_enum = requires {
  E::Fused;
};

template <class E = attn::SdpaBackend>
E fused_backend() {
  if constexpr (has_fused_enum<E>) {
    return E::Fused;
  } else {
    return E::Auto;
  }
}
const char* fused_name() { return has_fused_enum<attn::SdpaBackend> ? "fused" : "auto"; }

bool have_forward() { return &attn::scaled_dot_product_attention_forward != nullptr; }
bool have_backward() { return &attn::scaled_dot_product_attention_backward != nullptr; }

struct Shape {
  const char* tag;
  int64_t B, H, H_kv, L_q, L_k, D;
  bool causal;
  // A score modifier (SdpaOptions): "softcap", "alibi", "relbias", "sinks", "all", or none.
  const char* mod = nullptr;
};

double forward_flops(const Shape& s) {
  double f = 4.0 * s.B * s.H * double(s.L_q) * double(s.L_k) * s.D;
  return s.causal ? f / 2 : f;
}

struct Inputs {
  attn::Tensor q, k, v, dout;
  attn::Tensor alibi, rel, sinks;  // the score modifiers' tensors
};

Inputs make_inputs(const Shape& s) {
  attn::Generator gen(0);
  Inputs in;
  in.q = attn::randn({s.B, s.H, s.L_q, s.D}, &gen);
  in.k = attn::randn({s.B, s.H_kv, s.L_k, s.D}, &gen);
  in.v = attn::randn({s.B, s.H_kv, s.L_k, s.D}, &gen);
  in.dout = attn::randn({s.B, s.H, s.L_q, s.D}, &gen);
  in.alibi = attn::rand({s.H}, &gen) * 0.1;
  in.rel = attn::randn({s.H, 2 * 128 + 1}, &gen);
  in.sinks = attn::randn({s.H}, &gen);
  return in;
}

attn::SdpaOptions options(const Shape& s, attn::SdpaBackend backend, const Inputs& in) {
  attn::SdpaOptions o;
  if (s.mod) {
    const std::string m = s.mod;
    if (m == "softcap" || m == "all") o.softcap = 30.0;
    if (m == "alibi" || m == "all") o.alibi_slopes = in.alibi;
    if (m == "relbias" || m == "all") o.relative_bias = in.rel;
    if (m == "sinks" || m == "all") o.sinks = in.sinks;
  }
  o.is_causal = s.causal;
  // Decoding (L_q < L_k) sees the whole cache: bottom-right alignment.
  o.causal_align = s.L_q < s.L_k ? attn::CausalAlign::BottomRight : attn::CausalAlign::TopLeft;
  o.enable_gqa = s.H != s.H_kv;
  o.backend = backend;
  return o;
}

void set_gflops(benchmark::State& state, double flops) {
  // Shown as "GFLOP=123.4/s": flops / 1e9 per iteration, as a rate.
  state.counters["GFLOP"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void bm_forward(benchmark::State& state, Shape s, attn::SdpaBackend backend) {
  Inputs in = make_inputs(s);
  attn::SdpaOptions o = options(s, backend, in);
  for (auto _ : state) {
    attn::Tensor out = attn::scaled_dot_product_attention(in.q, in.k, in.v, o);
    benchmark::DoNotOptimize(out.raw_data());
  }
  set_gflops(state, forward_flops(s));
}

void bm_forward_backward(benchmark::State& state, Shape s, attn::SdpaBackend backend) {
  Inputs in = make_inputs(s);
  attn::SdpaOptions o = options(s, backend, in);
  for (auto _ : state) {
    attn::SdpaForwardResult f = attn::scaled_dot_product_attention_forward(in.q, in.k, in.v, o);
    auto [dq, dk, dv] =
        attn::scaled_dot_product_attention_backward(in.dout, in.q, in.k, in.v, f, o);
    benchmark::DoNotOptimize(dq.raw_data());
    benchmark::DoNotOptimize(dv.raw_data());
  }
  set_gflops(state, 3.5 * forward_flops(s));
}

void bm_backward(benchmark::State& state, Shape s, attn::SdpaBackend backend) {
  Inputs in = make_inputs(s);
  attn::SdpaOptions o = options(s, backend, in);
  attn::SdpaForwardResult f = attn::scaled_dot_product_attention_forward(in.q, in.k, in.v, o);
  for (auto _ : state) {
    auto [dq, dk, dv] =
        attn::scaled_dot_product_attention_backward(in.dout, in.q, in.k, in.v, f, o);
    benchmark::DoNotOptimize(dq.raw_data());
    benchmark::DoNotOptimize(dv.raw_data());
  }
  set_gflops(state, 2.5 * forward_flops(s));
}

// Decoding reads K and V once: the forward's timing (bm_forward, whose GFLOP counter it keeps),
// also as K and V bytes per second, against the machine's read bandwidth measured in the same run
// (bm_read_bandwidth).
void bm_decode_bandwidth(benchmark::State& state, Shape s, attn::SdpaBackend backend) {
  bm_forward(state, s, backend);
  const double kv_bytes = 2.0 * double(s.B * s.H_kv * s.L_k * s.D) * sizeof(float);
  state.counters["KV_GBps"] =
      benchmark::Counter(kv_bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// The same decoding from a paged key/value cache (attn::PagedKVCache, pages of 16 tokens) whose
// pool holds float32, bfloat16 or int8: the bytes read are the pool's (int8 with its scales), so
// the narrower formats are bounded by the same bandwidth at fewer bytes. The B sequences' pages are
// interleaved in the pool (written a page at a time, in turn), as a server's would be.
void bm_paged_decode(benchmark::State& state, Shape s, attn::KVCacheDtype dtype) {
  const int64_t page = 16;
  attn::PagedKVCacheOptions co;
  co.num_pages = s.B * ((s.L_k + page - 1) / page);
  co.page_size = page;
  co.num_kv_heads = s.H_kv;
  co.head_dim = s.D;
  co.dtype = dtype;
  attn::PagedKVCache cache(co);
  attn::Generator gen(0);
  std::vector<int64_t> seqs;
  for (int64_t b = 0; b < s.B; ++b) seqs.push_back(cache.add_sequence());
  const attn::Tensor kv = attn::randn({page, s.H_kv, s.D}, &gen);
  for (int64_t t = 0; t < s.L_k; t += page)
    for (int64_t seq : seqs) {
      const int64_t n = std::min(page, s.L_k - t);
      const int64_t pos = cache.extend(seq, n);
      cache.write(0, seq, pos, kv.narrow(0, 0, n) * float(1 + t % 7), kv.narrow(0, 0, n));
    }
  const attn::Tensor q = attn::randn({s.B, 1, s.H, s.D}, &gen);
  attn::SdpaOptions o;
  o.is_causal = true;
  for (auto _ : state) {
    attn::Tensor out = cache.attention(0, seqs, q, o);
    benchmark::DoNotOptimize(out.raw_data());
  }
  set_gflops(state, forward_flops(s));
  state.counters["KV_GBps"] = benchmark::Counter(double(cache.pool_bytes()) / 1e9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// The read bandwidth of this machine and thread count, in GB/s: each thread sums its own slice of
// 1 GiB of floats (pages it touched first) in 32 independent lanes, so neither the adds nor the
// instruction set bound it: a pure streaming read. (OpenBLAS's sasum, used before, ran on one
// thread at any thread count in Debian's build on Zen 3, and at about 85% of this on one.)
#if defined(__x86_64__)
#define ATTN_BENCH_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define ATTN_BENCH_CLONES
#endif
ATTN_BENCH_CLONES
float sum_blocks(const float* p, int64_t blocks) {
  float acc[32] = {};
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const float* row = p + blk * 32;
#pragma omp simd
    for (int l = 0; l < 32; ++l) acc[l] += row[l];
  }
  float total = 0.0f;
  for (float a : acc) total += a;
  return total;
}

void bm_read_bandwidth(benchmark::State& state) {
  const int64_t n = int64_t(1) << 28, blocks = n / 32;
  const std::unique_ptr<float[]> x(new float[size_t(n)]);
  const int threads = attn::get_num_threads();
  // Thread t owns blocks [t * blocks / threads, (t + 1) * blocks / threads): it touches them first
  // (its pages) and reads them.
  auto range = [&](int t) { return std::pair{t * blocks / threads, (t + 1) * blocks / threads}; };
#pragma omp parallel num_threads(threads)
  {
    const auto [lo, hi] = range(omp_get_thread_num());
    std::fill(x.get() + lo * 32, x.get() + hi * 32, 0.5f);
  }
  for (auto _ : state) {
    float total = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const auto [lo, hi] = range(omp_get_thread_num());
      total += sum_blocks(x.get() + lo * 32, hi - lo);
    }
    benchmark::DoNotOptimize(total);
  }
  state.counters["GBps"] = benchmark::Counter(double(n) * sizeof(float) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

void bm_sgemm(benchmark::State& state) {
  const int n = 1024;
  std::vector<float> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = float(i % 97) / 97.0f - 0.5f;
    b[i] = float(i % 89) / 89.0f - 0.5f;
  }
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  set_gflops(state, 2.0 * n * double(n) * n);
}

std::string shape_name(const Shape& s) {
  char buf[160];
  if (s.mod) {
    std::snprintf(buf, sizeof buf, "%s/%s/B%lld_H%lld_Lq%lld_Lk%lld_D%lld/%s", s.tag, s.mod,
                  (long long)s.B, (long long)s.H, (long long)s.L_q, (long long)s.L_k,
                  (long long)s.D, s.causal ? "causal" : "full");
  } else if (s.H != s.H_kv) {
    std::snprintf(buf, sizeof buf, "%s/B%lld_H%lld_Hkv%lld_Lq%lld_Lk%lld_D%lld/%s", s.tag,
                  (long long)s.B, (long long)s.H, (long long)s.H_kv, (long long)s.L_q,
                  (long long)s.L_k, (long long)s.D, s.causal ? "causal" : "full");
  } else if (s.L_q != s.L_k) {
    std::snprintf(buf, sizeof buf, "%s/B%lld_H%lld_Lq%lld_Lk%lld_D%lld/%s", s.tag, (long long)s.B,
                  (long long)s.H, (long long)s.L_q, (long long)s.L_k, (long long)s.D,
                  s.causal ? "causal" : "full");
  } else {
    std::snprintf(buf, sizeof buf, "%s/B%lld_H%lld_L%lld_D%lld/%s", s.tag, (long long)s.B,
                  (long long)s.H, (long long)s.L_q, (long long)s.D, s.causal ? "causal" : "full");
  }
  return buf;
}

std::vector<Shape> shapes() {
  std::vector<Shape> v;
  for (bool causal : {false, true}) {
    for (int64_t L : {512, 1024, 2048, 4096}) v.push_back({"sweep", 1, 12, 12, L, L, 64, causal});
    v.push_back({"batch", 4, 12, 12, 1024, 1024, 64, causal});
    v.push_back({"gqa", 1, 12, 4, 2048, 2048, 64, causal});
  }
  v.push_back({"decode", 1, 12, 12, 1, 4096, 64, false});
  // The attention of the two training configurations of BENCHMARKS.md (nanoGPT: 12 x 64 tokens,
  // 4 heads of 32; 6 x 384: 16 x 256 tokens, 6 heads of 64), causal.
  v.push_back({"train_nanogpt", 12, 4, 4, 64, 64, 32, true});
  v.push_back({"train_6x384", 16, 6, 6, 256, 256, 64, true});
  return v;
}

// The score modifiers against the plain kernel ("none"), fused kernel only: training-sized
// attention (causal and full) and decoding.
std::vector<Shape> mod_shapes() {
  std::vector<Shape> v;
  for (const char* mod : {"none", "softcap", "alibi", "relbias", "sinks", "all"}) {
    v.push_back({"mods", 1, 12, 12, 2048, 2048, 64, true, mod});
    v.push_back({"mods", 1, 12, 12, 2048, 2048, 64, false, mod});
    v.push_back({"mods", 1, 12, 12, 1, 4096, 64, false, mod});
  }
  return v;
}

// --threads=N (default 2) is ours; everything else goes to Google Benchmark.
int take_threads_flag(int& argc, char** argv) {
  int threads = 2;
  if (const char* env = std::getenv("ATTN_BENCH_THREADS")) threads = std::atoi(env);
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      threads = std::atoi(argv[i] + 10);
    } else {
      argv[out++] = argv[i];
    }
  }
  argc = out;
  return threads < 1 ? 1 : threads;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = take_threads_flag(argc, argv);
  attn::set_num_threads(threads);  // OpenMP and OpenBLAS alike
  benchmark::AddCustomContext("attn_threads", std::to_string(threads));
  benchmark::AddCustomContext("attn_fused_backend", fused_name());
  benchmark::AddCustomContext("attn_backward", have_backward() ? "linked" : "not yet in libattn");

  benchmark::RegisterBenchmark("sgemm/1024x1024x1024", bm_sgemm)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("bandwidth/read_1GiB", bm_read_bandwidth)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  // Decoding of Llama-3-8B-shaped attention (32 query heads, 8 key/value heads, D 128): one
  // query against 4096 and 32768 cached keys, batch 1 and 8.
  for (int64_t B : {1, 8})
    for (int64_t L_k : {4096, 32768}) {
      const Shape s{"decode_bw", B, 32, 8, 1, L_k, 128, false};
      benchmark::RegisterBenchmark(
          ("fwd/" + std::string(fused_name()) + "/" + shape_name(s)).c_str(), bm_decode_bandwidth,
          s, fused_backend())
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }

  // The same from a paged cache of float32, bfloat16, float16 and int8 (not the 4.3 GB case).
  for (const auto& [dtype, name] :
       {std::pair{attn::KVCacheDtype::Float32, "f32"},
        std::pair{attn::KVCacheDtype::BFloat16, "bf16"},
        std::pair{attn::KVCacheDtype::Float16, "f16"}, std::pair{attn::KVCacheDtype::Int8, "int8"}})
    for (const auto& [B, L_k] : {std::pair<int64_t, int64_t>{1, 4096}, {1, 32768}, {8, 4096}}) {
      const Shape s{"decode_bw", B, 32, 8, 1, L_k, 128, false};
      benchmark::RegisterBenchmark(("fwd/paged_" + std::string(name) + "/" + shape_name(s)).c_str(),
                                   bm_paged_decode, s, dtype)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }

  const bool fwd_bwd = have_forward() && have_backward();
  struct Kernel {
    const char* name;
    attn::SdpaBackend backend;
  };
  const Kernel kernels[] = {{"reference", attn::SdpaBackend::Reference},
                            {fused_name(), fused_backend()}};
  for (const Kernel& kernel : kernels) {
    std::vector<Shape> all = shapes();
    if (kernel.backend != attn::SdpaBackend::Reference)
      for (const Shape& s : mod_shapes()) all.push_back(s);
    for (const Shape& s : all) {
      const std::string name = shape_name(s);
      auto reg = [&](const char* dir, auto fn) {
        benchmark::RegisterBenchmark((std::string(dir) + "/" + kernel.name + "/" + name).c_str(),
                                     fn, s, kernel.backend)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      };
      reg("fwd", bm_forward);
      if (fwd_bwd) {
        reg("fwdbwd", bm_forward_backward);
        reg("bwd", bm_backward);
      }
    }
  }

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
