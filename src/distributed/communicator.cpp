// attn::distributed: the Communicator's Tensor-level calls (validation, cross-rank agreement,
// averages, statistics), waiting with a deadline, the world and abort_job. The transport is in
// backend.h's CommBackend.
#include <attn/autograd.h>
#include <attn/distributed.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "../ops/optim_ops.h"
#include "../tensor/internal.h"
#include "backend.h"

namespace attn::distributed {

using attn::detail::fail;

namespace detail {
namespace {

// Marks `w` done and runs its completion step once.
void complete(Work::Impl& w) {
  w.done = true;
  if (w.then) w.then();
}

}  // namespace

void wait_until_done(Work::Impl& w) {
  if (w.done) return;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration<double>(w.timeout_s);
  // Poll: MPI moves a large message only while someone calls into it, so a waiting rank keeps
  // testing (yielding the core between tests, for oversubscribed ranks); only a wait that has
  // already lasted 50 ms (a slower rank, not a transfer) sleeps between tests, 50 us at a time.
  // With more ranks than cores, the rank being waited for needs this core: sleep at once.
  auto now = t0;
  for (int64_t i = 0;; ++i) {
    if (w.test()) break;
    if (i < 1000) continue;
    if ((i & 255) == 0) now = Clock::now();
    if (!w.oversubscribed && now - t0 < std::chrono::milliseconds(50)) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    now = Clock::now();
    if (now > deadline) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.0f", w.timeout_s);
      abort_job(w.what + " timed out after " + buf +
                    " s: another rank is not responding (it died, hangs, or called a different "
                    "collective); set ATTN_DIST_TIMEOUT to wait longer",
                1);
    }
  }
  if (w.wait_s) *w.wait_s += std::chrono::duration<double>(Clock::now() - t0).count();
  complete(w);
}

bool test_once(Work::Impl& w) {
  if (w.done) return true;
  if (!w.test()) return false;
  complete(w);
  return true;
}

// A pending operation that must finish where no exception may leave (destructor, move): waits,
// and ends the job if the operation failed.
void finish_or_abort(Work::Impl& w) noexcept {
  if (w.done) return;
  try {
    wait_until_done(w);
  } catch (const std::exception& e) {
    abort_job(std::string("a pending operation failed: ") + e.what());
  }
}

}  // namespace detail

// ---- Work ---------------------------------------------------------------------------------------

void Work::ImplDeleter::operator()(Impl* p) const { delete p; }
Work::Work(std::unique_ptr<Impl, ImplDeleter> impl) : impl_(std::move(impl)) {}
Work::Work(Work&&) noexcept = default;
Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    if (impl_) detail::finish_or_abort(*impl_);
    impl_ = std::move(other.impl_);
  }
  return *this;
}
Work::~Work() {
  if (impl_) detail::finish_or_abort(*impl_);
}
void Work::wait() {
  if (impl_) detail::wait_until_done(*impl_);
}
bool Work::is_completed() { return !impl_ || detail::test_once(*impl_); }

// ---- the world ----------------------------------------------------------------------------------

namespace {

std::mutex world_mutex;
std::unique_ptr<Communicator> world_comm;
bool finalized = false;

double timeout_from(const InitOptions& o) {
  if (o.timeout_s > 0) return o.timeout_s;
  if (const char* env = std::getenv("ATTN_DIST_TIMEOUT")) {
    char* end = nullptr;
    double v = std::strtod(env, &end);
    if (end != env && v > 0) return v;
  }
  return 300;
}

detail::Type type_of(const Tensor& t) {
  switch (t.dtype()) {
    case Dtype::Float32: return detail::Type::F32;
    case Dtype::Int64: return detail::Type::I64;
    case Dtype::Bool: return detail::Type::U8;
    case Dtype::BFloat16:
    case Dtype::Float16: break;  // refused by check_op before any reduction
  }
  attn::detail::fail_reduced(t.dtype(), "distributed");
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "SUM";
    case ReduceOp::Avg: return "AVG";
    case ReduceOp::Max: return "MAX";
    case ReduceOp::Min: return "MIN";
  }
  return "?";
}

// The tensor a collective reads or writes: defined, contiguous. As in torch.distributed,
// collectives are not recorded by autograd (they write parameters' values in place).
void check_tensor(const Tensor& t, const char* fn, const char* name = "tensor") {
  if (!t.defined()) fail(fn, name, " is undefined");
  if (!t.is_contiguous())
    fail(fn, name, " ", attn::detail::tensor_desc(t), " must be contiguous (call .contiguous())");
}

void check_op(const Tensor& t, ReduceOp op, const char* fn) {
  attn::detail::check_not_reduced(t, fn);  // reductions add in float32 or int64 only
  if (t.dtype() == Dtype::Bool && (op == ReduceOp::Sum || op == ReduceOp::Avg))
    fail(fn, "ReduceOp.", op_name(op), " is not supported for bool tensors (use MAX or MIN)");
  if (t.dtype() == Dtype::Int64 && op == ReduceOp::Avg)
    fail(fn, "ReduceOp.AVG needs a float32 tensor, got ", attn::detail::tensor_desc(t));
}

void check_peer(int peer, int size, const char* fn, const char* what) {
  if (peer < 0 || peer >= size)
    fail(fn, what, " ", peer, " is not a rank of this communicator (size ", size, ")");
}

std::string signature(const char* fn, const Tensor& t, const std::string& extra = "") {
  return std::string(fn) + "(" + attn::detail::tensor_desc(t) + extra + ")";
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h ^ s.size();
}

// A division per element, not a multiplication by 1/size: the rounding of torch's sum / size.
void divide(float* p, int64_t n, int size) { attn::detail::divide_host(p, n, float(size)); }

int64_t bytes_of(const Tensor& t) { return t.numel() * int64_t(itemsize(t.dtype())); }

}  // namespace

bool mpi_available() { return detail::backend_has_mpi(); }

void init(const InitOptions& options) {
  std::lock_guard<std::mutex> lock(world_mutex);
  if (finalized) fail("init", "attn::distributed was finalized; it cannot be initialised again");
  if (world_comm) return;
  const double timeout = timeout_from(options);
  auto backend = detail::make_world_backend();
  backend->timeout_s = timeout;
  backend->oversubscribed =
      backend->local_size() > int(std::max(1u, std::thread::hardware_concurrency()));
  world_comm = std::make_unique<Communicator>(std::move(backend));
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(world_mutex);
  return world_comm != nullptr;
}

void finalize() {
  std::lock_guard<std::mutex> lock(world_mutex);
  if (!world_comm) return;
  world_comm.reset();
  finalized = true;
  detail::backend_finalize();
}

Communicator& world() {
  if (!is_initialized()) init();
  std::lock_guard<std::mutex> lock(world_mutex);
  if (!world_comm) fail("world", "attn::distributed was finalized");
  return *world_comm;
}
int rank() { return world().rank(); }
int world_size() { return world().size(); }
int local_rank() { return world().local_rank(); }

void abort_job(const std::string& message, int code) {
  int r = 0, n = 1;
  {
    // No lock: abort_job may be called while the world is being used (a timeout inside a call).
    if (world_comm) r = world_comm->rank(), n = world_comm->size();
  }
  std::fprintf(stderr, "attn: rank %d/%d: %s\n", r, n, message.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  detail::backend_abort(code);
}

// ---- Communicator -------------------------------------------------------------------------------

Communicator::Communicator(std::shared_ptr<detail::CommBackend> backend) : b_(std::move(backend)) {}
int Communicator::rank() const { return b_->rank(); }
int Communicator::size() const { return b_->size(); }
std::string Communicator::backend() const { return b_->name(); }
int Communicator::local_rank() const { return b_->local_rank(); }
int Communicator::local_size() const { return b_->local_size(); }
Communicator::Stats Communicator::stats() const { return b_->stats; }
void Communicator::reset_stats() { b_->stats = {}; }

namespace {
Work make_work(detail::CommBackend& b, std::unique_ptr<Work::Impl> w, std::string what,
               uint64_t bytes, std::function<void()> then = {}) {
  w->what = std::move(what);
  w->timeout_s = b.timeout_s;
  w->wait_s = &b.stats.wait_s;
  w->oversubscribed = b.oversubscribed;
  if (then) w->then = std::move(then);
  b.stats.bytes += bytes;
  b.stats.calls += 1;
  return Work(std::unique_ptr<Work::Impl, Work::ImplDeleter>(w.release()));
}
}  // namespace

void Communicator::check_same(const std::string& what, const std::string& value) {
  const int n = size();
  if (n == 1) return;
  const std::string what_op = "check_same(" + what + ")";
  std::vector<uint64_t> hashes(std::size_t(n), 0);
  const uint64_t mine = fnv1a(value);
  make_work(*b_, b_->all_gather(&mine, hashes.data(), 8), what_op, 8).wait();
  int differs = -1;
  for (int r = 0; r < n; ++r)
    if (hashes[std::size_t(r)] != hashes[0]) {
      differs = r;
      break;
    }
  if (differs < 0) return;
  // Exchange the values themselves (lengths first, then every value padded to the longest, up to
  // 1 MiB) and show both around their first difference.
  constexpr int64_t kLimit = int64_t(1) << 20;
  const int64_t my_len = std::min<int64_t>(int64_t(value.size()), kLimit);
  std::vector<int64_t> lens(std::size_t(n), 0);
  make_work(*b_, b_->all_gather(&my_len, lens.data(), 8), what_op, 8).wait();
  const int64_t width = *std::max_element(lens.begin(), lens.end());
  std::string padded = value.substr(0, std::size_t(my_len));
  padded.resize(std::size_t(width), '\0');
  std::vector<char> all(std::size_t(width) * std::size_t(n));
  make_work(*b_, b_->all_gather(padded.data(), all.data(), width), what_op, uint64_t(width)).wait();
  auto value_of = [&](int r) {
    return std::string(all.data() + std::size_t(width) * std::size_t(r), std::size_t(lens[r]));
  };
  const std::string a = value_of(0), b = value_of(differs);
  std::size_t at = 0;
  while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
  auto around = [&](const std::string& v) {
    constexpr std::size_t kBefore = 60, kAfter = 100;
    const std::size_t from = at > kBefore ? at - kBefore : 0;
    std::string out = (from > 0 ? "..." : "") + v.substr(from, at - from + kAfter);
    if (from + (at - from) + kAfter < v.size()) out += "...";
    return out;
  };
  std::string ranks;
  for (int r = 1; r < n; ++r)
    if (hashes[std::size_t(r)] != hashes[0])
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  throw DistributedError(
      attn::detail::msg("distributed", what, " differs across ranks, first at character ", at,
                        ": rank 0 has ", around(a), " but rank ", differs, " has ", around(b),
                        " (ranks that differ from rank 0: ", ranks, ")"));
}

void Communicator::all_reduce(Tensor& t, ReduceOp op) { all_reduce_async(t, op).wait(); }

Work Communicator::all_reduce_async(Tensor& t, ReduceOp op) {
  const char* fn = "all_reduce";
  check_tensor(t, fn);
  check_op(t, op, fn);
  check_same("the tensor of all_reduce", signature(fn, t, std::string(", ") + op_name(op)));
  NoGradGuard no_grad;
  attn::detail::bump_version(t);
  std::function<void()> then;
  if (op == ReduceOp::Avg) {
    Tensor keep = t;
    const int n = size();
    then = [keep, n]() mutable { divide(keep.data_ptr<float>(), keep.numel(), n); };
  }
  return make_work(*b_, b_->all_reduce(t.raw_data(), t.numel(), type_of(t), op), signature(fn, t),
                   uint64_t(bytes_of(t)), std::move(then));
}

Tensor Communicator::all_gather(const Tensor& t) {
  const char* fn = "all_gather";
  check_tensor(t, fn);
  check_same("the tensor of all_gather", signature(fn, t));
  Shape shape = t.shape();
  shape.insert(shape.begin(), size());
  Tensor out = attn::detail::make_tensor(shape, t.dtype());
  make_work(*b_, b_->all_gather(t.raw_data(), out.raw_data(), int64_t(bytes_of(t))),
            signature(fn, t), uint64_t(bytes_of(t)))
      .wait();
  return out;
}

Tensor Communicator::reduce_scatter(const Tensor& t, ReduceOp op) {
  const char* fn = "reduce_scatter";
  check_tensor(t, fn);
  check_op(t, op, fn);
  if (t.dim() < 1 || t.size(0) % size() != 0)
    fail(fn, "the input ", attn::detail::tensor_desc(t), " must have a first dim divisible by the ",
         "world size ", size());
  check_same("the tensor of reduce_scatter", signature(fn, t, std::string(", ") + op_name(op)));
  Shape shape = t.shape();
  shape[0] /= size();
  Tensor out = attn::detail::make_tensor(shape, t.dtype());
  make_work(*b_, b_->reduce_scatter(t.raw_data(), out.raw_data(), out.numel(), type_of(t), op),
            signature(fn, t), uint64_t(bytes_of(t)))
      .wait();
  if (op == ReduceOp::Avg) divide(out.data_ptr<float>(), out.numel(), size());
  return out;
}

void Communicator::broadcast(Tensor& t, int root) {
  const char* fn = "broadcast";
  check_tensor(t, fn);
  check_peer(root, size(), fn, "root");
  check_same("the tensor of broadcast", signature(fn, t, ", root " + std::to_string(root)));
  attn::detail::bump_version(t);
  make_work(*b_, b_->broadcast(t.raw_data(), int64_t(bytes_of(t)), root), signature(fn, t),
            uint64_t(bytes_of(t)))
      .wait();
}

Work Communicator::isend(const Tensor& t, int dst, int tag) {
  const char* fn = "send";
  check_tensor(t, fn);
  check_peer(dst, size(), fn, "dst");
  if (tag < 0) fail(fn, "tag must be >= 0, got ", tag);
  return make_work(*b_, b_->send(t.raw_data(), int64_t(bytes_of(t)), dst, tag),
                   signature(fn, t, " to rank " + std::to_string(dst)), uint64_t(bytes_of(t)));
}

Work Communicator::irecv(Tensor& t, int src, int tag) {
  const char* fn = "recv";
  check_tensor(t, fn);
  check_peer(src, size(), fn, "src");
  if (tag < 0) fail(fn, "tag must be >= 0, got ", tag);
  attn::detail::bump_version(t);
  return make_work(*b_, b_->recv(t.raw_data(), int64_t(bytes_of(t)), src, tag),
                   signature(fn, t, " from rank " + std::to_string(src)), 0);
}

void Communicator::send(const Tensor& t, int dst, int tag) { isend(t, dst, tag).wait(); }
void Communicator::recv(Tensor& t, int src, int tag) { irecv(t, src, tag).wait(); }

void Communicator::barrier() { make_work(*b_, b_->barrier(), "barrier", 0).wait(); }

Work Communicator::all_reduce_async_raw(float* data, int64_t count, ReduceOp op) {
  std::function<void()> then;
  if (op == ReduceOp::Avg) {
    const int n = size();
    then = [data, count, n] { divide(data, count, n); };
  }
  return make_work(*b_, b_->all_reduce(data, count, detail::Type::F32, op),
                   "all_reduce(float32[" + std::to_string(count) + "])", uint64_t(count) * 4,
                   std::move(then));
}

void Communicator::reduce_scatter_raw(const float* in, float* out, int64_t count, ReduceOp op) {
  make_work(*b_, b_->reduce_scatter(in, out, count, detail::Type::F32, op),
            "reduce_scatter(float32[" + std::to_string(count * size()) + "])",
            uint64_t(count) * uint64_t(size()) * 4)
      .wait();
  if (op == ReduceOp::Avg) divide(out, count, size());
}

void Communicator::all_gather_raw(const float* in, float* out, int64_t count) {
  make_work(*b_, b_->all_gather(in, out, count * 4),
            "all_gather(float32[" + std::to_string(count) + "])", uint64_t(count) * 4)
      .wait();
}

}  // namespace attn::distributed
