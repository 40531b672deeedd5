// The ranks' shares of the work in attn::train (data or context parallel) and the evaluation that
// runs on them.
#include <attn/autograd.h>
#include <attn/distributed.h>
#include <attn/train.h>

#include <utility>
#include <vector>

#include "train_internal.h"

namespace attn::train::detail {

std::pair<Tensor, Tensor> Shard::batch(const data::TextDataset& ds, bool train, int64_t B,
                                       int64_t T, Generator& gen) const {
  if (context) {
    auto [x, y] = ds.batch(train, B, T, &gen);
    const auto z = distributed::Sharding::Zigzag;
    return {distributed::shard_sequence(x, 1, rank, world, z).contiguous(),
            distributed::shard_sequence(y, 1, rank, world, z).contiguous()};
  }
  auto [x, y] = ds.batch(train, world * B, T, &gen);
  if (world == 1) return {x, y};
  return {x.narrow(0, rank * B, B).contiguous(), y.narrow(0, rank * B, B).contiguous()};
}

nn::GPT::Output Shard::forward(const nn::GPT& model, const Tensor& x, const Tensor& y) const {
  if (!context) return model.forward(x, y);
  const int64_t T = x.size(1) * world;
  Tensor positions = distributed::shard_positions(T, rank, world, distributed::Sharding::Zigzag);
  return model.forward_sharded(
      x, y, positions, [](const Tensor& q, const Tensor& k, const Tensor& v) {
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
      auto [x, y] = shard.batch(ds, split == 0, o.batch_size, o.model.block_size, gen);
      losses.push_back(shard.forward(model, x, y).loss.item<float>());
    }
    Tensor l = from_vector(losses, {int64_t(losses.size())});
    if (shard.world > 1) distributed::world().all_reduce(l, distributed::ReduceOp::Avg);
    result[split] = double(l.mean().item<float>());
  }
  model.train();
  return {result[0], result[1]};
}

}  // namespace attn::train::detail
