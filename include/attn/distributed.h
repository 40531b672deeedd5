// attn::distributed: communication between processes, and what is built on it (data-parallel
// gradient averaging, context-parallel ring attention).
//
// The engine is MPI (Debian's OpenMPI): launch with `mpirun -np N program ...`. Everything here
// also works without it: a program started without mpirun, or a build without MPI (CMake option
// ATTN_MPI=OFF), is a world of one rank, where every collective is a copy or nothing.
//
// The model is torch.distributed's: one process per rank, collectives that every rank of a
// communicator calls in the same order with tensors of the same shape and dtype. attn checks that
// agreement for the Tensor-level calls below (a small all-gather of a signature first), so a
// mismatch is an attn::Error naming the ranks and the shapes instead of a hang or corrupt data.
//
// Faults. No call waits for ever: every wait has a deadline (InitOptions::timeout_s, default
// 300 s, or the ATTN_DIST_TIMEOUT environment variable in seconds). A rank that misses it prints
// "attn: rank R/N: <op> timed out after S s ..." and aborts the whole job (MPI_Abort), so a rank
// that hangs or dies takes the others down within a bounded time. A rank that fails with an error
// should call abort_job() (the attn CLI does), which prints the error and aborts every rank.
// The ranks that mpirun then stops print "attn: rank R/N: stopped by the launcher ...".
#pragma once

#include <attn/nn.h>
#include <attn/optim.h>
#include <attn/tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attn::distributed {

// A failure between ranks rather than a bad argument: ranks that disagree (shapes, settings), or
// the transport reporting an error. Python sees RuntimeError, as torch.distributed raises.
class DistributedError : public Error {
 public:
  explicit DistributedError(const std::string& what) : Error(what) {}
};

// torch.distributed.ReduceOp. Avg divides the sum by the world size (float32 only).
enum class ReduceOp { Sum, Avg, Max, Min };

struct InitOptions {
  // Seconds any single wait (collective, send, receive) may take before the job is aborted.
  // <= 0 means the ATTN_DIST_TIMEOUT environment variable, else 300.
  double timeout_s = 0;
};

// Whether this build can talk to other processes (built with MPI).
bool mpi_available();

// Joins the job that the launcher (mpirun) started: rank, world size and local rank come from its
// environment. Without a launcher (or without MPI) this process is rank 0 of a world of 1.
// Idempotent; the first call's options win. Called implicitly by world().
void init(const InitOptions& options = {});
bool is_initialized();
// Leaves the job (MPI_Finalize at exit is also registered by init). After it, no call here works.
void finalize();

// Handle of an asynchronous operation. wait() blocks until it is done (with the deadline above);
// the destructor of a pending Work waits too.
class Work {
 public:
  Work() = default;
  Work(Work&&) noexcept;
  Work& operator=(Work&&) noexcept;
  ~Work();
  void wait();
  bool is_completed();  // polls; makes progress
  bool valid() const { return impl_ != nullptr; }

  struct Impl;  // src/distributed/backend.h
  struct ImplDeleter {
    void operator()(Impl* p) const;
  };
  explicit Work(std::unique_ptr<Impl, ImplDeleter> impl);

 private:
  std::unique_ptr<Impl, ImplDeleter> impl_;
};

namespace detail {
class CommBackend;  // MPI or the single-process world (src/distributed/)
}

// A group of ranks that communicate (torch.distributed's process group). world() is everyone.
// Tensor arguments must be contiguous; float32, int64 and bool are supported (bool: Max = any,
// Min = all, no Sum/Avg). Results are written in place where torch writes in place.
class Communicator {
 public:
  int rank() const;
  int size() const;
  int local_rank() const;  // among the ranks on this machine
  int local_size() const;  // ranks on this machine
  // "mpi" or "single".
  std::string backend() const;

  // Element-wise reduction of `t` over the ranks, in place on every rank.
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum);
  // Every rank's `t` concatenated along a new leading dim: (size(), *t.shape()).
  Tensor all_gather(const Tensor& t);
  // torch's reduce_scatter_tensor: `t` (size() * n, ...) is reduced over the ranks and rank r
  // keeps rows [r * n, (r + 1) * n): returns (n, ...).
  Tensor reduce_scatter(const Tensor& t, ReduceOp op = ReduceOp::Sum);
  // Rank `root`'s `t` is copied into `t` on every rank.
  void broadcast(Tensor& t, int root = 0);
  // Point to point. recv writes into `t`, which must have the shape and dtype that was sent.
  void send(const Tensor& t, int dst, int tag = 0);
  void recv(Tensor& t, int src, int tag = 0);
  // Non-blocking forms: the tensors must stay alive and untouched until the Work is done.
  Work isend(const Tensor& t, int dst, int tag = 0);
  Work irecv(Tensor& t, int src, int tag = 0);
  Work all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::Sum);
  void barrier();

  // Raw-buffer forms without the cross-rank signature check, for hot paths that checked their
  // layout once (the gradient reducer): count elements of float32 at `data`.
  Work all_reduce_async_raw(float* data, int64_t count, ReduceOp op);
  void reduce_scatter_raw(const float* in, float* out, int64_t count_per_rank, ReduceOp op);
  void all_gather_raw(const float* in, float* out, int64_t count_per_rank);

  // Checks that every rank passes the same `value` (a configuration, a list of shapes) for
  // `what`; throws attn::Error on every rank naming the ranks that differ and both values
  // (shortened) otherwise. A collective: every rank must call it.
  void check_same(const std::string& what, const std::string& value);

  // Communication statistics since the last reset (for benchmarks): bytes sent into
  // collectives/point-to-point by this rank and seconds spent waiting for them.
  struct Stats {
    uint64_t bytes = 0;
    double wait_s = 0;
    int64_t calls = 0;
  };
  Stats stats() const;
  void reset_stats();

  explicit Communicator(std::shared_ptr<detail::CommBackend> backend);

 private:
  std::shared_ptr<detail::CommBackend> b_;
};

// The communicator of all ranks (initialises on first use).
Communicator& world();
int rank();
int world_size();
// The rank among the processes on this machine (OMPI_COMM_WORLD_LOCAL_RANK; 0 without mpirun).
int local_rank();

// Prints "attn: rank R/N: <message>" to stderr and ends every rank of the job with `code`
// (MPI_Abort). Without MPI (or with one rank) it exits the process with `code`.
[[noreturn]] void abort_job(const std::string& message, int code = 1);

// ---- data parallelism --------------------------------------------------------------------------

// Averages the gradients of `params` over the ranks during the backward pass, as
// torch.nn.parallel.DistributedDataParallel does: the parameters are grouped into buckets of
// about bucket_bytes (in reverse order, the order in which backward produces their gradients);
// when every gradient of a bucket has been accumulated (autograd's post-accumulate-grad hook),
// the bucket is copied into one flat buffer and its all-reduce starts, overlapping with the rest
// of the backward. finish() (after backward) waits for the buckets and writes the averages back
// into each .grad. A parameter that got no gradient on this rank counts as zeros (and gets a
// zero .grad), so ranks never disagree on what they reduce. Buckets start in a fixed order on
// every rank, whatever order backward hands out the gradients.
// The constructor broadcasts rank 0's parameter values to every rank (so replicas start equal) and
// checks that every rank has the same parameter shapes.
// Per element, the result is the sum over ranks divided by the world size: identical on every
// rank; bitwise equal to a single process on the concatenated batch only where that process's
// own reduction order matches (it does not in general: expect fp32 rounding differences).
// finish_in_backward: finish() runs by itself inside the backward pass, as soon as the last bucket
// has started (every parameter got its gradient), as DDP does; a pass in which some parameter
// gets no gradient then stays pending until finish() is called.
class GradReducer {
 public:
  GradReducer(std::vector<Tensor> params, Communicator comm = world(),
              int64_t bucket_bytes = 1 << 20, bool finish_in_backward = false);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;
  // Waits for every bucket and writes the averaged gradients into the parameters' .grad. Call
  // once per backward pass, after it; then the reducer is ready for the next pass.
  void finish();
  int64_t num_buckets() const;
  // While disabled, backward passes only accumulate local gradients (DDP's no_sync(): gradient
  // accumulation); the next enabled pass averages the accumulated sums.
  void set_enabled(bool enabled);
  bool enabled() const;
  // DDP's find_unused_parameters: walks the autograd graph from `outputs` (the forward's results)
  // and marks the parameters it does not reach as ready (zero gradient) for the coming pass, so
  // that finish_in_backward still completes when part of the model was not used.
  void prepare_for_backward(const std::vector<Tensor>& outputs);
  // Whether a pass has begun (some gradient arrived) and not been finished.
  bool pending() const;
  // The parameters that have not received their gradient in the pending pass.
  std::vector<int64_t> unready() const;
  // Seconds finish() spent waiting for communication in its last call (not hidden by backward).
  double last_wait_s() const;

  struct State;

 private:
  std::shared_ptr<State> s_;
};

// ZeRO stage 1 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
// Parameter Models", 2020) over optim::AdamW's update: the parameters are laid end to end (group
// order) in one flat vector of n values cut into size() shards of ceil(n / size()); rank r keeps
// AdamW's exp_avg and exp_avg_sq for its shard only (1 / size() of the optimizer memory). step():
//   1. reduce-scatter of the ranks' local gradients (mean over ranks): each rank gets its shard
//      of the averaged gradient (no GradReducer is needed, nor allowed: it would average twice);
//   2. with max_norm > 0, clip_grad_norm_'s rule on the global norm (the shards' squared sums
//      in double, exchanged and added in rank order, so every rank gets the same norm);
//   3. AdamW's update of the shard (the same float arithmetic as optim::AdamW);
//   4. all-gather of the updated shards into every rank's parameters.
// The results equal a replicated AdamW on all-reduced gradients up to the order in which the
// ranks' gradients are summed (the norm is summed in another order too): fp32 rounding.
// Unlike optim::AdamW, every parameter is updated at every step (a missing gradient is zeros).
class ZeroAdamW {
 public:
  ZeroAdamW(std::vector<optim::ParamGroup> groups, const optim::AdamWOptions& options,
            Communicator comm = world());
  // Returns the total gradient norm before clipping (computed whatever max_norm).
  double step(double max_norm = 0.0);
  void zero_grad();
  void set_lr(double lr);
  double lr() const;
  int64_t shard_size() const;
  // The whole state in optim::AdamW's format ("state.{i}.exp_avg", ...), gathered from every
  // rank: a collective. Checkpoints written from it resume with any number of ranks, with or
  // without ZeRO.
  nn::NamedTensors state_dict();
  // Takes this rank's shard of a full state (optim::AdamW's format). Throws attn::Error as
  // optim::AdamW::load_state_dict does.
  void load_state_dict(const nn::NamedTensors& state);

  struct State;

 private:
  std::shared_ptr<State> s_;
};

// ---- context parallelism -----------------------------------------------------------------------

// How a sequence of length L is split over the P ranks of a communicator for ring attention.
//   Contiguous: rank r holds positions [r L/P, (r+1) L/P).
//   Zigzag:     the sequence is cut into 2P chunks and rank r holds chunks r and 2P-1-r, so that
//               under causal masking every rank has the same amount of work.
enum class Sharding { Contiguous, Zigzag };

// The global positions (int64, (L / P)) that rank `rank` of `world` holds; L must be divisible by
// P (Contiguous) or 2P (Zigzag).
Tensor shard_positions(int64_t L, int rank, int world, Sharding sharding);
// Takes this rank's shard of `x` along dim `dim` (the sequence dim) / puts the shards back.
Tensor shard_sequence(const Tensor& x, int64_t dim, int rank, int world, Sharding sharding);
Tensor unshard_sequence(const std::vector<Tensor>& shards, int64_t dim, Sharding sharding);

struct RingOptions {
  bool is_causal = false;                // causal over the global positions (top-left aligned)
  Sharding sharding = Sharding::Zigzag;  // how q and k/v are sharded (the same for both)
  std::optional<double> scale;           // default 1 / sqrt(D)
  bool enable_gqa = false;               // as SdpaOptions::enable_gqa
  // Optional bool (B, L_k_local) key padding mask of this rank's keys (true = ignore); it travels
  // round the ring with its keys.
  Tensor key_padding_mask;
  // Optional bool or float32 mask of THIS rank's query rows against the WHOLE key sequence,
  // broadcastable to (B, H, L_local, L) with L = P * L_local: its query (second-to-last) dim in
  // this rank's local order (the rows of q as this rank holds them, e.g. shard_sequence of a full
  // (L, L) mask along dim -2), its key (last) dim in global order (positions 0 .. L-1). Meaning as
  // SdpaOptions::attn_mask (bool: true = may attend; float: added to the scaled scores); combined
  // with is_causal and key_padding_mask (a key must pass all that are given). It stays on its
  // rank (each block of keys uses its columns) and gets no gradient.
  Tensor attn_mask;
};

// Context-parallel attention (Liu et al., "Ring Attention with Blockwise Transformers", 2023;
// causal load balance by the zigzag layout of Sharding::Zigzag, in the spirit of Brandon et al.'s
// Striped Attention, 2023): q (B, H, L_local, D), k (B, H_kv, L_local, D),
// v (B, H_kv, L_local, D_v) hold this rank's shard of a sequence of length L = P * L_local; the
// result (B, H, L_local, D_v) is this rank's shard of attention over the whole sequence. Key/value
// blocks travel round the ring (the next block is in flight while the fused kernel runs on the
// current one); partial outputs merge through their log-sum-exp. Differentiable: the backward
// sends the key/value blocks round again with their gradients, which arrive back at their owner.
// Every rank of `comm` must call it with the same shapes and options (attn_mask included). Masks
// where they shard: key_padding_mask travels with its keys, attn_mask stays with its queries.
// Dropout and sliding windows are not supported here.
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                      const RingOptions& options = {}, Communicator comm = world());

}  // namespace attn::distributed
