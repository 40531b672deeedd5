// The MPI transport (Debian's OpenMPI). Used when the job was started by a launcher (mpirun sets
// OMPI_COMM_WORLD_SIZE, or PMI_SIZE / PMIX_RANK for others); a program started on its own is a
// world of one rank without touching MPI at all (no singleton start-up of an MPI runtime).
//
// Every operation is non-blocking (MPI_I*) and completed by polling MPI_Test, so that waiting has a
// deadline (communicator.cpp) and a gradient bucket's all-reduce progresses while the backward
// pass goes on. Errors return (MPI_ERRORS_RETURN) and become attn::Error naming the call.
#include <mpi.h>
#include <unistd.h>

#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>

#include "../common/error.h"
#include "backend.h"

namespace attn::distributed::detail {
namespace {

using attn::detail::fail;

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw DistributedError(
      attn::detail::msg("distributed", call, " failed: ", std::string(msg, std::size_t(len))));
}

MPI_Datatype mpi_type(Type t) {
  switch (t) {
    case Type::F32: return MPI_FLOAT;
    case Type::I64: return MPI_INT64_T;
    case Type::U8: return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  return MPI_SUM;
}

int to_count(int64_t n, const char* call) {
  if (n < 0 || n > INT_MAX)
    fail(call, "a message of ", n, " elements exceeds MPI's limit of ", INT_MAX,
         " per call: split the tensor");
  return int(n);
}

// A pending MPI request; `status_check` runs on completion (recv's size check).
std::unique_ptr<Work::Impl> pending(MPI_Request req, const char* call,
                                    std::function<void(const MPI_Status&)> status_check = {}) {
  auto r = std::make_shared<MPI_Request>(req);
  auto w = std::make_unique<Work::Impl>();
  w->test = [r, call, status_check] {
    int flag = 0;
    MPI_Status st;
    check(MPI_Test(r.get(), &flag, &st), call);
    if (flag && status_check) status_check(st);
    return flag != 0;
  };
  return w;
}

// "attn: rank R/N: stopped by the launcher" when mpirun ends this rank because another failed.
// Only async-signal-safe calls: the message is formatted at start-up.
char stop_message[160];
std::size_t stop_message_len = 0;
extern "C" void on_terminate(int sig) {
  ssize_t ignored = write(STDERR_FILENO, stop_message, stop_message_len);
  (void)ignored;
  _exit(128 + sig);
}

class MpiBackend final : public CommBackend {
 public:
  MpiBackend() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      // Only the thread that calls attn::distributed talks to MPI (OpenMP workers never do).
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
      std::atexit([] { backend_finalize(); });
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (const char* lr = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) local_rank_ = std::atoi(lr);
    local_size_ = size_;
    if (const char* ls = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) local_size_ = std::atoi(ls);
    const int n = std::snprintf(stop_message, sizeof stop_message,
                                "attn: rank %d/%d: stopped by the launcher (another rank failed or "
                                "the job was interrupted; see its message)\n",
                                rank_, size_);
    stop_message_len = n > 0 ? std::min(std::size_t(n), sizeof stop_message - 1) : 0;
    std::signal(SIGTERM, on_terminate);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string name() const override { return "mpi"; }

  std::unique_ptr<Work::Impl> all_reduce(void* buf, int64_t count, Type type,
                                         ReduceOp op) override {
    MPI_Request req;
    check(MPI_Iallreduce(MPI_IN_PLACE, buf, to_count(count, "all_reduce"), mpi_type(type),
                         mpi_op(op), MPI_COMM_WORLD, &req),
          "MPI_Iallreduce");
    return pending(req, "MPI_Iallreduce");
  }
  std::unique_ptr<Work::Impl> all_gather(const void* in, void* out, int64_t bytes) override {
    MPI_Request req;
    const int n = to_count(bytes, "all_gather");
    check(MPI_Iallgather(in, n, MPI_BYTE, out, n, MPI_BYTE, MPI_COMM_WORLD, &req),
          "MPI_Iallgather");
    return pending(req, "MPI_Iallgather");
  }
  std::unique_ptr<Work::Impl> reduce_scatter(const void* in, void* out, int64_t count, Type type,
                                             ReduceOp op) override {
    MPI_Request req;
    check(MPI_Ireduce_scatter_block(in, out, to_count(count, "reduce_scatter"), mpi_type(type),
                                    mpi_op(op), MPI_COMM_WORLD, &req),
          "MPI_Ireduce_scatter_block");
    return pending(req, "MPI_Ireduce_scatter_block");
  }
  std::unique_ptr<Work::Impl> broadcast(void* buf, int64_t bytes, int root) override {
    MPI_Request req;
    check(MPI_Ibcast(buf, to_count(bytes, "broadcast"), MPI_BYTE, root, MPI_COMM_WORLD, &req),
          "MPI_Ibcast");
    return pending(req, "MPI_Ibcast");
  }
  std::unique_ptr<Work::Impl> send(const void* buf, int64_t bytes, int dst, int tag) override {
    MPI_Request req;
    check(MPI_Isend(buf, to_count(bytes, "send"), MPI_BYTE, dst, tag, MPI_COMM_WORLD, &req),
          "MPI_Isend");
    return pending(req, "MPI_Isend");
  }
  std::unique_ptr<Work::Impl> recv(void* buf, int64_t bytes, int src, int tag) override {
    MPI_Request req;
    // A longer message fails with MPI's "message truncated"; a shorter one is caught below.
    const int n = to_count(bytes, "recv");
    check(MPI_Irecv(buf, n, MPI_BYTE, src, tag, MPI_COMM_WORLD, &req), "MPI_Irecv");
    return pending(req, "MPI_Irecv", [bytes, src, tag](const MPI_Status& st) {
      int got = 0;
      MPI_Get_count(&st, MPI_BYTE, &got);
      if (int64_t(got) != bytes)
        fail("recv", "rank ", src, " sent ", got, " bytes with tag ", tag,
             " but the receiving tensor has ", bytes);
    });
  }
  std::unique_ptr<Work::Impl> barrier() override {
    MPI_Request req;
    check(MPI_Ibarrier(MPI_COMM_WORLD, &req), "MPI_Ibarrier");
    return pending(req, "MPI_Ibarrier");
  }

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
};

bool launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

bool mpi_started = false;

}  // namespace

bool backend_has_mpi() { return true; }

std::shared_ptr<CommBackend> make_world_backend() {
  if (!launched_by_mpirun()) return make_single_backend();
  auto b = std::make_shared<MpiBackend>();
  mpi_started = true;
  return b;
}

void backend_abort(int code) {
  if (mpi_started) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void backend_finalize() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

}  // namespace attn::distributed::detail
