// Figures for attn::distributed (not a test): run under mpirun, rank 0 prints one JSON object per
// line, read by bench/distributed.py.
//
//   bench_distributed allreduce [--min-bytes B] [--max-bytes B] [--seconds S]
//       MPI all-reduce (SUM, float32) of 4 KiB .. 64 MiB on the world: median time per call and
//       the "bus bandwidth" 2 (P - 1) / P * bytes / time that a ring all-reduce moves per rank.
//   bench_distributed ring --L L [--B B --H H --D D --causal 0|1 --backward 0|1 --reps N]
//       ring_attention on a sequence of L tokens sharded (zigzag) over the world: median forward
//       and forward + backward seconds, TFLOP/s counted as on one machine (4 B H L^2 D, halved
//       when causal; backward 2.5x forward), and every rank's peak RSS (getrusage).
#include <attn/attn.h>
#include <attn/distributed.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace dist = attn::distributed;
using attn::Tensor;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string flag(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 2; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

double peak_rss_mib() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;
}

// Every rank's peak RSS, gathered to all.
std::vector<double> all_peaks() {
  Tensor mine = attn::full({1}, peak_rss_mib());
  Tensor all = dist::world().all_gather(mine);
  std::vector<double> out;
  for (int64_t r = 0; r < all.size(0); ++r) out.push_back(all[r][0].item<double>());
  return out;
}

std::string list(const std::vector<double>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.1f", i ? ", " : "", v[i]);
    s += buf;
  }
  return s + "]";
}

int allreduce(int argc, char** argv) {
  auto& w = dist::world();
  const int64_t lo = std::atoll(flag(argc, argv, "--min-bytes", "4096").c_str());
  const int64_t hi = std::atoll(flag(argc, argv, "--max-bytes", "67108864").c_str());
  const double budget = std::atof(flag(argc, argv, "--seconds", "0.5").c_str());
  for (int64_t bytes = lo; bytes <= hi; bytes *= 4) {
    const int64_t n = bytes / 4;
    std::vector<float> buf(std::size_t(n), 1.0f);
    w.all_reduce_async_raw(buf.data(), n, dist::ReduceOp::Sum).wait();  // warm-up
    std::vector<double> times;
    const auto start = Clock::now();
    // Every rank runs the same number of calls: rank 0 decides when to stop.
    for (int it = 0;; ++it) {
      w.barrier();
      const auto t0 = Clock::now();
      w.all_reduce_async_raw(buf.data(), n, dist::ReduceOp::Sum).wait();
      times.push_back(seconds_since(t0));
      Tensor stop = attn::full({1}, (it >= 4 && seconds_since(start) > budget) ? 1.0 : 0.0);
      w.broadcast(stop, 0);
      if (stop.item<double>() > 0) break;
    }
    const double t = median(times), P = w.size();
    if (w.rank() == 0)
      std::printf(
          "{\"bench\": \"allreduce\", \"ranks\": %d, \"bytes\": %lld, \"median_s\": %.3e, "
          "\"calls\": %zu, \"bus_gb_s\": %.3f, \"algo_gb_s\": %.3f}\n",
          w.size(), (long long)bytes, t, times.size(), 2 * (P - 1) / P * double(bytes) / t / 1e9,
          double(bytes) / t / 1e9);
    std::fflush(stdout);
  }
  return 0;
}

int ring(int argc, char** argv) {
  auto& w = dist::world();
  const int64_t L = std::atoll(flag(argc, argv, "--L", "65536").c_str());
  const int64_t B = std::atoll(flag(argc, argv, "--B", "1").c_str());
  const int64_t H = std::atoll(flag(argc, argv, "--H", "2").c_str());
  const int64_t D = std::atoll(flag(argc, argv, "--D", "64").c_str());
  const bool causal = flag(argc, argv, "--causal", "1") == "1";
  const bool backward = flag(argc, argv, "--backward", "1") == "1";
  const int reps = std::atoi(flag(argc, argv, "--reps", "2").c_str());
  const int P = w.size(), r = w.rank();
  if (L % (2 * P) != 0) {
    std::fprintf(stderr, "--L must be divisible by 2 x ranks\n");
    return 2;
  }
  const int64_t Ll = L / P;
  attn::Generator gen(1234 + uint64_t(r));  // each rank makes its own shard
  Tensor q = attn::randn({B, H, Ll, D}, &gen), k = attn::randn({B, H, Ll, D}, &gen),
         v = attn::randn({B, H, Ll, D}, &gen), dout = attn::randn({B, H, Ll, D}, &gen);
  dist::RingOptions o;
  o.is_causal = causal;
  o.sharding = dist::Sharding::Zigzag;
  std::vector<double> fwd, fb;
  const double before = peak_rss_mib();
  for (int it = 0; it < reps; ++it) {
    w.barrier();
    auto t0 = Clock::now();
    {
      attn::NoGradGuard ng;
      Tensor out = dist::ring_attention(q, k, v, o, w);
    }
    w.barrier();
    fwd.push_back(seconds_since(t0));
    if (backward) {
      Tensor qg = q.detach().requires_grad_(), kg = k.detach().requires_grad_(),
             vg = v.detach().requires_grad_();
      w.barrier();
      t0 = Clock::now();
      Tensor out = dist::ring_attention(qg, kg, vg, o, w);
      out.backward(dout);
      w.barrier();
      fb.push_back(seconds_since(t0));
    }
  }
  const std::vector<double> peaks = all_peaks();
  const double flops =
      4.0 * double(B * H) * double(L) * double(L) * double(D) * (causal ? 0.5 : 1.0);
  // What one process would hold for the same call: q, k, v, out (and dq, dk, dv, dout) at full L.
  const double full_mib = double(B * H * L * D) * 4.0 * (backward ? 8 : 4) / (1 << 20);
  if (r == 0)
    std::printf(
        "{\"bench\": \"ring\", \"ranks\": %d, \"L\": %lld, \"B\": %lld, \"H\": %lld, \"D\": %lld, "
        "\"causal\": %s, \"fwd_s\": %.3f, \"fwd_tflops\": %.4f, \"fwdbwd_s\": %.3f, "
        "\"fwdbwd_tflops\": %.4f, \"rss_before_mib\": %.1f, \"peak_rss_mib\": %s, "
        "\"one_process_tensors_mib\": %.1f}\n",
        P, (long long)L, (long long)B, (long long)H, (long long)D, causal ? "true" : "false",
        median(fwd), flops / median(fwd) / 1e12, backward ? median(fb) : 0.0,
        backward ? 3.5 * flops / median(fb) / 1e12 : 0.0, before, list(peaks).c_str(), full_mib);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  dist::init();
  const std::string what = argc > 1 ? argv[1] : "";
  int rc = 2;
  if (what == "allreduce")
    rc = allreduce(argc, argv);
  else if (what == "ring")
    rc = ring(argc, argv);
  else if (dist::rank() == 0)
    std::fprintf(stderr, "usage: bench_distributed allreduce|ring [options] (see the source)\n");
  dist::world().barrier();
  dist::finalize();
  return rc;
}
