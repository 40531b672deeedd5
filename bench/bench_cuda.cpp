// attn's side of bench/compare_cuda.py: times attention on a GPU (and cuBLAS's bf16 GEMM, the
// yardstick) for cases read from stdin, one JSON line per case on stdout. compare_cuda.py runs it
// as a subprocess beside PyTorch so that the two alternate case by case in one run.
//
//   sdpa <bf16|fp16> <B> <H> <L> <D> <causal 0|1> <fwd|fwdbwd> <reps>
//     -> {"median_ms": ..., "best_ms": ...}   q, k, v (B, H, L, D) contiguous, random normal
//   gemm <M> <N> <K> <reps>
//     -> {"median_ms": ..., "best_ms": ...}   bf16 in, fp32 accumulate, bf16 out (cublasGemmEx)
//   quit
//
// Each case runs 3 warm-up calls, then `reps` calls timed one by one with CUDA events. Errors go
// to stdout as {"error": "..."} and the bench goes on with the next case.
#include <attn/attn.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Median and best of `reps` timed calls of f, in milliseconds.
template <typename F>
std::pair<double, double> time_calls(F&& f, int reps) {
  for (int i = 0; i < 3; ++i) f();
  check(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    check(cudaEventRecord(start), "cudaEventRecord");
    f();
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0;
    check(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front()};
}

std::string result(std::pair<double, double> t) {
  std::ostringstream os;
  os << "{\"median_ms\": " << t.first << ", \"best_ms\": " << t.second << "}";
  return os.str();
}

std::string run_sdpa(std::istringstream& in) {
  std::string dtype, pass;
  int64_t B, H, L, D;
  int causal, reps;
  if (!(in >> dtype >> B >> H >> L >> D >> causal >> pass >> reps))
    throw std::runtime_error("sdpa: expected <dtype> <B> <H> <L> <D> <causal> <pass> <reps>");
  const attn::Dtype dt = dtype == "fp16" ? attn::Dtype::Float16 : attn::Dtype::BFloat16;
  const attn::Device gpu("cuda");
  attn::manual_seed(0);
  auto make = [&] { return attn::randn({B, H, L, D}).to(gpu, dt); };
  attn::Tensor q = make(), k = make(), v = make();
  attn::SdpaOptions o;
  o.is_causal = causal != 0;
  if (pass == "fwd")
    return result(
        time_calls([&] { attn::scaled_dot_product_attention_forward(q, k, v, o); }, reps));
  if (pass != "fwdbwd") throw std::runtime_error("sdpa: pass must be fwd or fwdbwd, got " + pass);
  attn::Tensor dout = make();
  return result(time_calls(
      [&] {
        attn::SdpaForwardResult f = attn::scaled_dot_product_attention_forward(q, k, v, o);
        attn::scaled_dot_product_attention_backward(dout, q, k, v, f, o);
      },
      reps));
}

std::string run_gemm(std::istringstream& in, cublasHandle_t handle) {
  int64_t M, N, K;
  int reps;
  if (!(in >> M >> N >> K >> reps)) throw std::runtime_error("gemm: expected <M> <N> <K> <reps>");
  const attn::Device gpu("cuda");
  attn::Tensor a = attn::randn({M, K}).to(gpu, attn::Dtype::BFloat16);
  attn::Tensor b = attn::randn({K, N}).to(gpu, attn::Dtype::BFloat16);
  attn::Tensor c = attn::empty({M, N}, attn::Dtype::BFloat16, gpu);
  const float one = 1, zero = 0;
  // Row-major C = A B is column-major C^T = B^T A^T.
  auto call = [&] {
    const cublasStatus_t s = cublasGemmEx(
        handle, CUBLAS_OP_N, CUBLAS_OP_N, int(N), int(M), int(K), &one, b.device_data(),
        CUDA_R_16BF, int(N), a.device_data(), CUDA_R_16BF, int(K), &zero, c.device_data(),
        CUDA_R_16BF, int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error("cublasGemmEx failed: status " + std::to_string(int(s)));
  };
  return result(time_calls(call, reps));
}

}  // namespace

int main() {
  if (!attn::cuda::is_available()) {
    std::cout << "{\"error\": \"no CUDA GPU\"}" << std::endl;
    return 1;
  }
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    std::cout << "{\"error\": \"cublasCreate failed\"}" << std::endl;
    return 1;
  }
  std::cout << "{\"ready\": \"" << attn::cuda::get_device_name(0) << "\"}" << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string what;
    in >> what;
    if (what == "quit") break;
    try {
      if (what == "sdpa")
        std::cout << run_sdpa(in) << std::endl;
      else if (what == "gemm")
        std::cout << run_gemm(in, handle) << std::endl;
      else
        throw std::runtime_error("unknown case '" + what + "'");
    } catch (const std::exception& e) {
      std::string msg = e.what();
      std::replace(msg.begin(), msg.end(), '"', '\'');
      std::cout << "{\"error\": \"" << msg << "\"}" << std::endl;
    }
  }
  cublasDestroy(handle);
  return 0;
}
