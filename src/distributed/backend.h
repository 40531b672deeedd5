// The transport behind attn::distributed::Communicator: raw buffers in, pending operations out.
// comm_mpi.cpp (MPI, when the job was started by mpirun) and comm_single.cpp (a world of one
// rank: without mpirun, or in a build without MPI, where comm_nompi.cpp stands in for
// comm_mpi.cpp). The Communicator (communicator.cpp) validates tensors, checks cross-rank
// agreement, converts ReduceOp::Avg into a sum and a division, and keeps the statistics; a backend
// does none of that.
#pragma once

#include <attn/distributed.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace attn::distributed {

// A pending operation: `test` makes progress and says whether it is done; `then` runs once after
// it completed (the division of an average, a copy out of a staging buffer); `what` names it in
// a timeout message. Waiting is done by wait_until_done (communicator.cpp) with the backend's
// deadline.
struct Work::Impl {
  std::function<bool()> test;
  std::function<void()> then;
  std::string what;
  double timeout_s = 300;
  double* wait_s = nullptr;  // where the time spent waiting is added (the stats)
  // More ranks than cores on this machine: a waiting rank sleeps early to give its core to the
  // rank it waits for, instead of polling.
  bool oversubscribed = false;
  bool done = false;
};

namespace detail {

enum class Type { F32, I64, U8 };

class CommBackend {
 public:
  virtual ~CommBackend() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual std::string name() const = 0;
  // Every call returns a pending operation (Work::Impl with `test` set; `what` is filled by the
  // caller). Counts are elements of `type`; buffers must outlive the operation.
  virtual std::unique_ptr<Work::Impl> all_reduce(void* buf, int64_t count, Type type,
                                                 ReduceOp op) = 0;  // in place; op != Avg
  virtual std::unique_ptr<Work::Impl> all_gather(const void* in, void* out,
                                                 int64_t bytes_per_rank) = 0;
  virtual std::unique_ptr<Work::Impl> reduce_scatter(const void* in, void* out,
                                                     int64_t count_per_rank, Type type,
                                                     ReduceOp op) = 0;
  virtual std::unique_ptr<Work::Impl> broadcast(void* buf, int64_t bytes, int root) = 0;
  virtual std::unique_ptr<Work::Impl> send(const void* buf, int64_t bytes, int dst, int tag) = 0;
  virtual std::unique_ptr<Work::Impl> recv(void* buf, int64_t bytes, int src, int tag) = 0;
  virtual std::unique_ptr<Work::Impl> barrier() = 0;

  double timeout_s = 300;
  bool oversubscribed = false;  // set by the Communicator from local_size() and the cores
  Communicator::Stats stats;
};

// A world of one rank (comm_single.cpp, in every build).
std::shared_ptr<CommBackend> make_single_backend();

// Made by the backend file of this build (comm_mpi.cpp or comm_nompi.cpp).
bool backend_has_mpi();
// The world of this process: MPI's when started by a launcher, else a world of one rank.
std::shared_ptr<CommBackend> make_world_backend();
// Ends every rank of the job (MPI_Abort) or, alone, this process.
[[noreturn]] void backend_abort(int code);
void backend_finalize();

// Waits for `w` until it is done or its deadline passes (then the job is aborted with a message
// naming w.what). Runs w.then once.
void wait_until_done(Work::Impl& w);
// One poll: whether `w` is done now (running w.then if it just finished).
bool test_once(Work::Impl& w);
// wait_until_done for places no exception may leave: a failure ends the job (abort_job).
void finish_or_abort(Work::Impl& w) noexcept;

}  // namespace detail
}  // namespace attn::distributed
