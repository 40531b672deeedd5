// The ranks' shares of the work in attn::train (data or context parallel) and the evaluation that
// runs on them.
#include <attn/autograd.h>
#include <attn/distributed.h>
#include <attn/train.h>

#include <tuple>
#include <utility>
#include <vector>

#include "train_internal.h"

namespace attn::train::detail {

Shard::Batch Shard::batch(const data::TextDataset& ds, bool train, int64_t B, int64_t T,
                          Generator& gen) const {
  Batch out;
  if (context) {  // never packed (TrainOptions::validate)
    auto [x, y] = ds.batch(train, B, T, &gen);
    const auto z = distributed::Sharding::Zigzag;
    out.x = distributed::shard_sequence(x, 1, rank, world, z).contiguous();
    out.y = distributed::shard_sequence(y, 1, rank, world, z).contiguous();
    return out;
  }
  if (ds.has_documents()) {
    static_cast<data::TextDataset::PackedBatch&>(out) = ds.packed_batch(train, world * B, T, &gen);
  } else {
    std::tie(out.x, out.y) = ds.batch(train, world * B, T, &gen);
  }
  if (world == 1) return out;
  auto mine = [&](const Tensor& t) {
    return t.defined() ? t.narrow(0, rank * B, B).contiguous() : t;
  };
  if (out.positions.defined()) {
    const int64_t* y = out.y.data_ptr<int64_t>();
    int64_t all = 0, own = 0;
    for (int64_t i = 0; i < world * B * T; ++i) {
      all += y[i] != -100;
      own += y[i] != -100 && i / (B * T) == rank;
    }
    out.loss_scale = all > 0 ? double(world) * double(own) / double(all) : 1.0;
  }
  out.x = mine(out.x);
  out.y = mine(out.y);
  out.positions = mine(out.positions);
  return out;
}

nn::GPT::Output Shard::forward(const nn::GPT& model, const Batch& b) const {
  if (b.positions.defined()) {
    nn::GPT::Output fw = model.forward_packed(b.x, b.y, b.positions);
    if (b.loss_scale == 1.0) return fw;
    // No target of this rank counts (mean 0/0 = nan): it adds nothing, to the loss or gradients.
    fw.loss = b.loss_scale > 0 ? fw.loss * b.loss_scale : fw.logits.sum() * 0.0;
    return fw;
  }
  if (!context) return model.forward(b.x, b.y);
  const int64_t T = b.x.size(1) * world;
  Tensor positions = distributed::shard_positions(T, rank, world, distributed::Sharding::Zigzag);
  return model.forward_sharded(
      b.x, b.y, positions, [](const Tensor& q, const Tensor& k, const Tensor& v) {
        distributed::RingOptions ro;
        ro.is_causal = true;
        ro.sharding = distributed::Sharding::Zigzag;
        return distributed::ring_attention(q, k, v, ro, distributed::world());
      });
}

std::pair<double, double> estimate_loss(nn::GPT& model, const data::TextDataset& ds,
                                        const TrainOptions& o, Generator& gen, const Shard& shard) {
  model.eval();
  NoGradGuard no_grad;
  double result[2] = {0, 0};
  for (int split = 0; split < 2; ++split) {
    std::vector<float> losses;
    losses.reserve(std::size_t(o.eval_iters));
    for (int64_t k = 0; k < o.eval_iters; ++k) {
      const Shard::Batch b = shard.batch(ds, split == 0, o.batch_size, o.model.block_size, gen);
      losses.push_back(shard.forward(model, b).loss.item<float>());
    }
    Tensor l = from_vector(losses, {int64_t(losses.size())});
    if (shard.world > 1) distributed::world().all_reduce(l, distributed::ReduceOp::Avg);
    result[split] = double(l.mean().item<float>());
  }
  model.train();
  return {result[0], result[1]};
}

}  // namespace attn::train::detail
