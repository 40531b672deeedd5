// Context parallelism: sequence sharding and ring attention, forward and backward.
//
// Ring attention (Liu, Zaharia and Abbeel, "Ring Attention with Blockwise Transformers for
// Near-Infinite Context", 2023). The sequence of length L is split over the P ranks of a
// communicator; each rank keeps its queries and passes its key/value block round the ring, so that
// after P steps every query has met every key, while no rank ever holds more than two blocks.
//
//   step t = 0 .. P-1: rank r holds the block of rank (r - t) mod P. It posts the send of that
//   block to rank (r + 1) mod P and the receive of the next one from rank (r - 1) mod P, computes
//   attention of its queries against the block it holds (the fused kernel) while the next block
//   is in flight, then waits for the transfer.
//
// Each block gives, per query row, a partial output and the log-sum-exp of its scores; partial
// results merge exactly (the "online softmax" of FlashAttention, Dao 2023, applied across blocks):
//   lse = logaddexp(lse_a, lse_b),  out = out_a exp(lse_a - lse) + out_b exp(lse_b - lse).
//
// Causal masking over the global positions. A rank's positions are one or two chunks (Contiguous:
// chunk r of P; Zigzag: chunks r and 2P-1-r of 2P, a load balancing in the spirit of Brandon et
// al.'s Striped Attention, 2023, so that every rank has the same number of unmasked scores). All
// chunks of a sharding have the same length, so a (query chunk, key chunk) pair is one of: key
// chunk before the query chunk (full attention), the same chunk (square causal, top-left), after it
// (skipped: every score is masked).
//
// Masks where they shard. A key padding mask belongs to the keys: it travels round the ring with
// its block. An attention mask (this rank's query rows against the whole key sequence, key columns
// in global order) belongs to the queries: it stays on its rank, and each (query chunk, key chunk)
// pair takes its rows by the query chunk's place in the shard and its columns by the key chunk's
// global positions (chunk index * chunk length). On a causal diagonal pair, where the fused kernel
// cannot take both is_causal and a mask, the pair's mask is combined with the lower triangle.
//
// The backward is FlashAttention-2's backward (Dao, "FlashAttention-2", 2023, Algorithm 2) done
// block by block: given the GLOBAL out and lse of a query row, the gradient contributions of one
// key block are exact on their own (P_ij = exp(s_ij - lse_i), D_i = rowsum(dout_i * out_i)), and
// scaled_dot_product_attention_backward computes them from the out and lse it is handed. The key
// blocks go round the ring again; dq accumulates locally, while dk and dv accumulate into running
// sums that follow their block from rank to rank and, after P hops, arrive back at its owner.
// (One limit: where inputs hold inf or NaN, scaled_dot_product_attention_backward may fall back to
// its reference kernel, which recomputes the softmax of the block alone instead of using the
// given lse; such gradients are not meaningful anyway, but they differ from the single process.)
#include <attn/attention.h>
#include <attn/autograd.h>
#include <attn/distributed.h>
#include <attn/ops.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "../ops/attention_internal.h"
#include "../tensor/internal.h"

namespace attn::distributed {

using attn::detail::fail;

namespace {

constexpr const char* kShardingNames[] = {"Contiguous", "Zigzag"};
const char* sharding_name(Sharding s) { return kShardingNames[s == Sharding::Zigzag ? 1 : 0]; }

// How many equal chunks a sequence is cut into.
int64_t num_chunks(int world, Sharding s) {
  return s == Sharding::Zigzag ? 2 * int64_t(world) : world;
}

void check_world(int rank, int world, const char* fn) {
  if (world < 1) fail(fn, "world size must be >= 1, got ", world);
  if (rank < 0 || rank >= world) fail(fn, "rank ", rank, " is outside [0, ", world, ")");
}

// Rejects a length that the sharding cannot split evenly.
void check_length(int64_t L, int world, Sharding s, const char* fn) {
  if (L < 0) fail(fn, "sequence length must be non-negative, got ", L);
  const int64_t n = num_chunks(world, s);
  if (L % n != 0)
    fail(fn, "sequence length ", L, " is not divisible by ", n, " (", sharding_name(s),
         " sharding over ", world, " ranks needs ", n, " equal chunks)");
}

// One chunk held by a rank: its index among the num_chunks() chunks of the sequence, and where it
// sits in the rank's shard.
struct Chunk {
  int64_t index, start, len;
};

std::vector<Chunk> chunks_of(int rank, int world, int64_t L_local, Sharding s) {
  if (s == Sharding::Contiguous) return {{rank, 0, L_local}};
  const int64_t c = L_local / 2;
  return {{rank, 0, c}, {2 * int64_t(world) - 1 - rank, c, c}};
}

// What a (query chunk, key chunk) pair computes.
enum class Pair { Full, Causal, Skip };

Pair pair_kind(const Chunk& q, const Chunk& k, bool causal) {
  if (!causal || k.index < q.index) return Pair::Full;
  return k.index == q.index ? Pair::Causal : Pair::Skip;
}

// What stays the same over the blocks of one call.
struct Config {
  bool causal = false;
  Sharding sharding = Sharding::Zigzag;
  std::optional<double> scale;
  bool enable_gqa = false;
  int rank = 0, world = 1;
  int64_t L_local = 0;
};

// The attention mask of one pair: `mask` (4 dims, broadcastable to (B, H, L_local, L)) narrowed
// to the query chunk's rows (local positions) and the key chunk's columns (global positions);
// dims of size 1 broadcast and stay. On a causal diagonal pair the lower triangle (top-left on the
// square block) is folded in: AND for a bool mask, -inf above the diagonal for a float one.
Tensor pair_mask(const Tensor& mask, Pair kind, const Chunk& qc, const Chunk& kc) {
  Tensor m = mask;
  if (m.size(2) != 1) m = m.narrow(2, qc.start, qc.len);
  if (m.size(3) != 1) m = m.narrow(3, kc.index * kc.len, kc.len);
  if (kind != Pair::Causal) return m;
  const Tensor tri = causal_mask(qc.len, kc.len);
  if (m.dtype() == Dtype::Bool) return m & tri;
  return m.masked_fill(~tri, -std::numeric_limits<double>::infinity());
}

// The options of the fused kernel for one pair; the key padding mask is the pair's key chunk, the
// attention mask (this rank's, undefined when none) is cut by pair_mask.
SdpaOptions pair_options(const Config& c, Pair kind, const Tensor& kpm, const Tensor& attn_mask,
                         const Chunk& qc, const Chunk& kc) {
  SdpaOptions o;
  if (attn_mask.defined())
    o.attn_mask = pair_mask(attn_mask, kind, qc, kc);
  else
    o.is_causal = kind == Pair::Causal;  // top-left on a square (len x len) block
  o.scale = c.scale;
  o.enable_gqa = c.enable_gqa;
  if (kpm.defined()) o.key_padding_mask = kpm.narrow(1, kc.start, kc.len);
  o.backend = SdpaBackend::Fused;
  return o;
}

// Polls pending transfers between two pieces of computation, so that MPI moves the data along
// while this rank computes (MPI without a progress thread transfers large messages only inside
// its calls).
void progress(std::vector<Work>& works) {
  for (Work& w : works)
    if (w.valid()) w.is_completed();
}

// The message tags of the ring's transfers.
enum Tag : int { kTagK = 0x5241, kTagV, kTagMask, kTagDk, kTagDv };

// A key/value block (with its padding mask) on its way round the ring.
struct Block {
  Tensor k, v, mask;
};

// This rank's block as it is sent: detached and contiguous (a copy only where the caller's
// tensor is not contiguous). Every transfer of a step is posted before any is waited for, so a
// send refused after the receives were posted would leave them waiting: nothing may fail there.
Block make_block(const Tensor& k, const Tensor& v, const Tensor& mask) {
  return {k.detach().contiguous(), v.detach().contiguous(),
          mask.defined() ? mask.detach().contiguous() : Tensor()};
}

// Posts the transfer of `cur` to the next rank and the receive of the next block into `into`.
void start_shift(Communicator& comm, const Block& cur, Block& into, std::vector<Work>& works) {
  const int P = comm.size(), r = comm.rank();
  const int next = (r + 1) % P, prev = (r - 1 + P) % P;
  if (!into.k.defined()) {
    into.k = empty(cur.k.shape());
    into.v = empty(cur.v.shape());
    if (cur.mask.defined()) into.mask = empty(cur.mask.shape(), Dtype::Bool);
  }
  works.push_back(comm.irecv(into.k, prev, kTagK));
  works.push_back(comm.irecv(into.v, prev, kTagV));
  if (cur.mask.defined()) works.push_back(comm.irecv(into.mask, prev, kTagMask));
  works.push_back(comm.isend(cur.k, next, kTagK));
  works.push_back(comm.isend(cur.v, next, kTagV));
  if (cur.mask.defined()) works.push_back(comm.isend(cur.mask, next, kTagMask));
}

void wait_all(std::vector<Work>& works) {
  for (Work& w : works)
    if (w.valid()) w.wait();
  works.clear();
}

// The forward pass: out (B, H, L_local, D_v) and lse (B, H, L_local) of this rank's queries
// against the whole sequence.
std::pair<Tensor, Tensor> ring_forward(const Tensor& q, const Block& own, const Tensor& attn_mask,
                                       const Config& c, Communicator& comm) {
  const int P = c.world;
  const int64_t B = q.size(0), H = q.size(1), L = c.L_local, Dv = own.v.size(3);
  Tensor out = zeros({B, H, L, Dv});
  Tensor lse = full({B, H, L}, -inf, Dtype::Float32);
  const std::vector<Chunk> q_chunks = chunks_of(c.rank, P, L, c.sharding);

  // Two receive buffers used in turn: the block of step t arrives in recv[(t - 1) % 2], while
  // recv[t % 2] (the block of step t - 1, sent on by now) takes the next one. The caller's own
  // block is sent, never received into.
  Block cur = own, recv[2];
  std::vector<Work> works;
  for (int t = 0; t < P; ++t) {
    Block& next = recv[t % 2];
    if (t + 1 < P) start_shift(comm, cur, next, works);
    const int src = (c.rank - t + P) % P;  // whose keys `cur` holds
    for (const Chunk& kc : chunks_of(src, P, L, c.sharding))
      for (const Chunk& qc : q_chunks) {
        const Pair kind = pair_kind(qc, kc, c.causal);
        if (kind == Pair::Skip) continue;
        const SdpaForwardResult r = scaled_dot_product_attention_forward(
            q.narrow(2, qc.start, qc.len), cur.k.narrow(2, kc.start, kc.len),
            cur.v.narrow(2, kc.start, kc.len), pair_options(c, kind, cur.mask, attn_mask, qc, kc));
        sdpa_detail::merge_partial(out, lse, r.out, r.lse, qc.start, "ring_attention");
        progress(works);
      }
    wait_all(works);
    if (t + 1 < P) cur = next;
  }
  return {out, lse};
}

// The backward pass: dq of this rank's queries, and dk, dv of this rank's keys and values (summed
// over every rank's queries).
std::vector<Tensor> ring_backward(const Tensor& dout, const Tensor& q, const Block& own,
                                  const Tensor& attn_mask, const Tensor& out, const Tensor& lse,
                                  const Config& c, Communicator& comm) {
  const int P = c.world, next_rank = (c.rank + 1) % P, prev_rank = (c.rank - 1 + P) % P;
  const int64_t L = c.L_local;
  const std::vector<Chunk> q_chunks = chunks_of(c.rank, P, L, c.sharding);
  Tensor dq = zeros(q.shape());

  Block cur = own, recv[2];  // as in ring_forward
  std::vector<Work> works;   // the key/value blocks
  // The running sums of dk, dv: the one this rank sent last step, the one arriving for the next.
  Tensor dk_sent, dv_sent, dk_in, dv_in;
  Work dk_send, dv_send, dk_recv, dv_recv;
  Tensor dk_own, dv_own;
  for (int t = 0; t < P; ++t) {
    Block& next = recv[t % 2];
    if (t + 1 < P) start_shift(comm, cur, next, works);
    const int src = (c.rank - t + P) % P;
    Tensor dk = zeros(cur.k.shape()), dv = zeros(cur.v.shape());
    for (const Chunk& kc : chunks_of(src, P, L, c.sharding))
      for (const Chunk& qc : q_chunks) {
        const Pair kind = pair_kind(qc, kc, c.causal);
        if (kind == Pair::Skip) continue;
        SdpaForwardResult f;
        f.out = out.narrow(2, qc.start, qc.len);
        f.lse = lse.narrow(2, qc.start, qc.len);
        auto [dq_p, dk_p, dv_p] = scaled_dot_product_attention_backward(
            dout.narrow(2, qc.start, qc.len), q.narrow(2, qc.start, qc.len),
            cur.k.narrow(2, kc.start, kc.len), cur.v.narrow(2, kc.start, kc.len), f,
            pair_options(c, kind, cur.mask, attn_mask, qc, kc));
        dq.narrow(2, qc.start, qc.len).add_(dq_p);
        dk.narrow(2, kc.start, kc.len).add_(dk_p);
        dv.narrow(2, kc.start, kc.len).add_(dv_p);
        progress(works);
        dk_recv.is_completed(), dv_recv.is_completed();
        dk_send.is_completed(), dv_send.is_completed();
      }
    if (P == 1) {
      dk_own = dk, dv_own = dv;
      break;
    }
    // Add the running sums of this block from the ranks that held it before (sent at the end of
    // their previous step), and pass the new sums on to the next rank.
    if (t > 0) {
      dk_recv.wait(), dv_recv.wait();
      dk.add_(dk_in), dv.add_(dv_in);
    }
    if (dk_send.valid()) dk_send.wait(), dv_send.wait();
    dk_sent = dk, dv_sent = dv;
    dk_in = empty(dk.shape()), dv_in = empty(dv.shape());
    dk_recv = comm.irecv(dk_in, prev_rank, kTagDk);
    dv_recv = comm.irecv(dv_in, prev_rank, kTagDv);
    dk_send = comm.isend(dk_sent, next_rank, kTagDk);
    dv_send = comm.isend(dv_sent, next_rank, kTagDv);
    wait_all(works);
    if (t + 1 < P) cur = next;
  }
  if (P > 1) {
    // After P hops the running sums of this rank's own block have come back from the previous rank.
    dk_recv.wait(), dv_recv.wait();
    dk_send.wait(), dv_send.wait();
    dk_own = dk_in, dv_own = dv_in;
  }
  return {dq, dk_own, dv_own};
}

std::string desc(const Tensor& t) {
  return t.defined() ? attn::detail::tensor_desc(t) : std::string("undefined");
}

// Local validation (every rank reaches the same verdict once check_same agreed on the inputs).
void validate(const Tensor& q, const Tensor& k, const Tensor& v, const RingOptions& o, int world,
              const char* fn) {
  for (auto [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    attn::detail::check_float32(*t, name, fn);
    if (t->dim() != 4)
      fail(fn, name, " ", shape_str(t->shape()), " must have 4 dims (B, H, L_local, D), got ",
           t->dim());
  }
  const std::string shapes = "q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) +
                             " and v " + shape_str(v.shape());
  if (k.size(0) != q.size(0) || v.size(0) != q.size(0))
    fail(fn, "batch sizes of ", shapes, " differ");
  if (k.size(2) != q.size(2) || v.size(2) != q.size(2))
    fail(fn, "sequence lengths of ", shapes,
         " differ (q and k/v are shards of one sequence, sharded alike)");
  if (k.size(3) != q.size(3)) fail(fn, "head dims of q and k differ: ", shapes);
  if (v.size(1) != k.size(1)) fail(fn, "k and v differ in the number of key/value heads: ", shapes);
  const int64_t H = q.size(1), H_kv = k.size(1);
  if (o.enable_gqa) {
    if (H_kv == 0 || H % H_kv != 0)
      fail(fn, "with enable_gqa the query heads (", H,
           ") must be a multiple of the key/value heads (", H_kv, "): ", shapes);
  } else if (H != H_kv) {
    fail(fn, "q has ", H, " heads and k, v have ", H_kv, " (", shapes,
         "): set enable_gqa for grouped-query attention");
  }
  const int64_t L = q.size(2);
  if (o.sharding == Sharding::Zigzag && L % 2 != 0)
    fail(fn, "Zigzag sharding needs an even local length (two equal chunks per rank), got ", shapes,
         " with L_local ", L, " over ", world, " ranks");
  if (o.scale && !(std::isfinite(*o.scale) && *o.scale > 0))
    fail(fn, "scale must be finite and positive, got ", *o.scale);
  if (!o.scale && q.size(3) == 0)
    fail(fn, "q ", shape_str(q.shape()),
         " has head dim 0: the default scale 1/sqrt(D) is undefined");
  if (o.key_padding_mask.defined()) {
    const Tensor& m = o.key_padding_mask;
    if (m.dtype() != Dtype::Bool)
      fail(fn, "key_padding_mask must be bool (true = ignore that key), got ", desc(m));
    if (m.dim() != 2 || (m.size(0) != q.size(0) && m.size(0) != 1) || m.size(1) != L)
      fail(fn, "key_padding_mask ", shape_str(m.shape()), " should be (", q.size(0), ", ", L,
           ") (batch, L_local) for ", shapes);
  }
  if (o.attn_mask.defined()) {
    const Tensor& m = o.attn_mask;
    const Shape target{q.size(0), H, L, int64_t(world) * L};
    if (m.dtype() != Dtype::Bool && m.dtype() != Dtype::Float32)
      fail(fn, "attn_mask must be bool (true = may attend) or float32 (added to the scores), got ",
           desc(m));
    bool ok = m.dim() <= 4;
    for (int64_t i = 1; ok && i <= m.dim(); ++i)
      ok = m.size(-i) == 1 || m.size(-i) == target[std::size_t(4 - i)];
    if (!ok)
      fail(fn, "attn_mask ", shape_str(m.shape()), " does not broadcast to ", shape_str(target),
           " (B, H, L_local, L): this rank's ", L, " query rows against all ", world * L,
           " keys of the sequence (", world, " ranks x L_local ", L,
           ", key columns in global order), for ", shapes);
  }
}

}  // namespace

// ---- sharding
// ------------------------------------------------------------------------------------

Tensor shard_positions(int64_t L, int rank, int world, Sharding sharding) {
  const char* fn = "shard_positions";
  check_world(rank, world, fn);
  check_length(L, world, sharding, fn);
  const int64_t n = L / world, c = L / num_chunks(world, sharding);
  Tensor pos = empty({n}, Dtype::Int64);
  int64_t* p = pos.data_ptr<int64_t>();
  for (const Chunk& ch : chunks_of(rank, world, n, sharding))
    for (int64_t i = 0; i < ch.len; ++i) p[ch.start + i] = ch.index * c + i;
  return pos;
}

Tensor shard_sequence(const Tensor& x, int64_t dim, int rank, int world, Sharding sharding) {
  const char* fn = "shard_sequence";
  if (!x.defined()) fail(fn, "x is an undefined tensor");
  check_world(rank, world, fn);
  const int64_t d = attn::detail::wrap_dim(dim, x.dim(), fn);
  const int64_t L = x.size(d);
  try {
    check_length(L, world, sharding, fn);
  } catch (const Error&) {
    fail(fn, "dim ", dim, " of ", desc(x), " has length ", L, ", which ", sharding_name(sharding),
         " sharding over ", world, " ranks cannot split: it needs a multiple of ",
         num_chunks(world, sharding));
  }
  const int64_t c = L / num_chunks(world, sharding);
  std::vector<Tensor> parts;
  for (const Chunk& ch : chunks_of(rank, world, L / world, sharding))
    parts.push_back(x.narrow(d, ch.index * c, c));
  return parts.size() == 1 ? parts[0] : cat(parts, d);
}

Tensor unshard_sequence(const std::vector<Tensor>& shards, int64_t dim, Sharding sharding) {
  const char* fn = "unshard_sequence";
  if (shards.empty()) fail(fn, "no shards given");
  const int world = int(shards.size());
  for (std::size_t i = 0; i < shards.size(); ++i) {
    if (!shards[i].defined()) fail(fn, "shard ", i, " is an undefined tensor");
    if (shards[i].shape() != shards[0].shape() || shards[i].dtype() != shards[0].dtype())
      fail(fn, "shard ", i, " is ", desc(shards[i]), " but shard 0 is ", desc(shards[0]),
           ": every rank holds an equal part");
  }
  const int64_t d = attn::detail::wrap_dim(dim, shards[0].dim(), fn);
  const int64_t n = shards[0].size(d);
  if (sharding == Sharding::Contiguous) return cat(shards, d);
  if (n % 2 != 0)
    fail(fn, "Zigzag shards hold two equal chunks, but dim ", dim, " of ", desc(shards[0]),
         " has odd length ", n);
  // Chunk j of the 2P: the first half of rank j's shard for j < P, else the second half of rank
  // 2P-1-j's.
  std::vector<Tensor> parts;
  for (int j = 0; j < 2 * world; ++j)
    parts.push_back(j < world ? shards[std::size_t(j)].narrow(d, 0, n / 2)
                              : shards[std::size_t(2 * world - 1 - j)].narrow(d, n / 2, n / 2));
  return cat(parts, d);
}

// ---- ring attention ----------------------------------------------------------------------------

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const RingOptions& options,
                      Communicator comm) {
  const char* fn = "ring_attention";
  const int P = comm.size();
  // Every rank must pass the same shapes and options; a rank that disagrees would make the others
  // wait on transfers of the wrong size. Agree first (every rank, whatever its inputs), so that
  // the validation below then fails identically on every rank or on none.
  if (P > 1) {
    std::ostringstream sig;
    sig << "q " << desc(q) << ", k " << desc(k) << ", v " << desc(v) << ", key_padding_mask "
        << desc(options.key_padding_mask) << ", attn_mask " << desc(options.attn_mask)
        << ", is_causal " << options.is_causal << ", sharding " << sharding_name(options.sharding)
        << ", scale " << (options.scale ? std::to_string(*options.scale) : "default")
        << ", enable_gqa " << options.enable_gqa;
    comm.check_same("ring_attention inputs", sig.str());
  }
  validate(q, k, v, options, P, fn);

  Config c;
  c.causal = options.is_causal;
  c.sharding = options.sharding;
  c.scale = options.scale;
  c.enable_gqa = options.enable_gqa;
  c.rank = comm.rank(), c.world = P;
  c.L_local = q.size(2);

  const Tensor& mask = options.key_padding_mask;
  const Block own = make_block(k, v, mask);
  // The attention mask with 4 dims (leading 1s), detached: it gets no gradient.
  Tensor attn_mask;
  if (options.attn_mask.defined()) {
    attn_mask = options.attn_mask.detach();
    while (attn_mask.dim() < 4) attn_mask = attn_mask.unsqueeze(0);
  }
  Tensor out, lse;
  {
    NoGradGuard no_grad;  // the node below differentiates the whole ring
    std::tie(out, lse) = ring_forward(q.detach(), own, attn_mask, c, comm);
  }
  return attn::detail::record(
      out, "RingAttentionBackward0", {&q, &k, &v},
      [c, comm](const Node& n, const Tensor& g) mutable {
        const Block own = make_block(n.saved_tensor(1), n.saved_tensor(2), n.saved_tensor(3));
        auto grads = ring_backward(g, n.saved_tensor(0), own, n.saved_tensor(6), n.saved_tensor(4),
                                   n.saved_tensor(5), c, comm);
        for (std::size_t i = 0; i < grads.size(); ++i)
          if (!n.needs_input_grad(i)) grads[i] = Tensor();
        return grads;
      },
      {q, k, v, own.mask, out, lse, attn_mask});
}

}  // namespace attn::distributed
