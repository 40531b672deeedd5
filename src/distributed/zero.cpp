// ZeroAdamW: AdamW with its state sharded over the ranks (ZeRO stage 1); see distributed.h.
#include <attn/autograd.h>
#include <attn/distributed.h>
#include <attn/ops.h>

#include <cmath>
#include <cstring>

#include "../common/error.h"
#include "../ops/optim_ops.h"
#include "backend.h"
#include "grads.h"

namespace attn::distributed {

using attn::detail::fail;

struct ZeroAdamW::State {
  Communicator comm;
  optim::AdamWOptions options;
  std::vector<Tensor> params;   // group order
  std::vector<double> decay;    // per parameter: its group's weight decay
  std::vector<int64_t> offset;  // per parameter: where it starts in the flat vector
  int64_t n = 0, shard = 0, begin = 0, end = 0;  // this rank holds [begin, end)
  std::vector<float> exp_avg, exp_avg_sq;        // (shard)
  std::vector<float> flat;                       // (size * shard) scratch: gradients, then values
  std::vector<float> grad_shard, value_shard;    // (shard)
  int64_t step = 0;

  explicit State(Communicator c) : comm(std::move(c)) {}

  // Calls f(param index, first element within the param, flat position, count) for every piece
  // of [lo, hi) that lies in one parameter.
  template <typename F>
  void for_pieces(int64_t lo, int64_t hi, F&& f) const {
    for (std::size_t k = 0; k < params.size(); ++k) {
      const int64_t a = std::max(lo, offset[k]), b = std::min(hi, offset[k] + params[k].numel());
      if (a < b) f(k, a - offset[k], a, b - a);
    }
  }
};

ZeroAdamW::ZeroAdamW(std::vector<optim::ParamGroup> groups, const optim::AdamWOptions& options,
                     Communicator comm)
    : s_(std::make_shared<State>(std::move(comm))) {
  State& s = *s_;
  // optim::AdamW validates options and parameters with its own messages.
  optim::AdamW check(groups, options);
  s.options = options;
  std::string shapes;
  // One shard may span several groups: only the weight decay may differ between groups.
  for (std::size_t gi = 0; gi < check.groups().size(); ++gi) {
    const optim::ParamGroup& g = check.groups()[gi];
    if (*g.lr != options.lr || *g.beta1 != options.beta1 || *g.beta2 != options.beta2 ||
        *g.eps != options.eps || *g.amsgrad)
      fail("ZeroAdamW", "parameter group ", gi,
           " sets its own lr, betas, eps or amsgrad; ZeroAdamW supports only a per-group "
           "weight_decay (and no amsgrad)");
  }
  for (const optim::ParamGroup& g : check.groups())  // resolved: every weight_decay set
    for (const Tensor& p : g.params) {
      s.offset.push_back(s.n);
      s.params.push_back(p);
      s.decay.push_back(*g.weight_decay);
      s.n += p.numel();
      shapes += shape_str(p.shape());
    }
  s.comm.check_same("the parameters of ZeroAdamW (shapes, in order)", shapes);
  const int64_t W = s.comm.size();
  s.shard = (s.n + W - 1) / W;
  s.begin = std::min(s.n, s.comm.rank() * s.shard);
  s.end = std::min(s.n, s.begin + s.shard);
  s.exp_avg.assign(std::size_t(s.shard), 0.0f);
  s.exp_avg_sq.assign(std::size_t(s.shard), 0.0f);
  s.flat.assign(std::size_t(W * s.shard), 0.0f);
  s.grad_shard.assign(std::size_t(s.shard), 0.0f);
  s.value_shard.assign(std::size_t(s.shard), 0.0f);
  NoGradGuard no_grad;
  for (Tensor& p : s.params) {  // replicas start from rank 0's values
    Tensor view = p.detach();
    s.comm.broadcast(view, 0);
  }
}

int64_t ZeroAdamW::shard_size() const { return s_->shard; }
double ZeroAdamW::lr() const { return s_->options.lr; }
void ZeroAdamW::set_lr(double lr) {
  if (!(lr >= 0.0)) fail("ZeroAdamW", "invalid learning rate ", lr);
  s_->options.lr = lr;
}

void ZeroAdamW::zero_grad() {
  for (Tensor& p : s_->params) p.set_grad(Tensor());
}

double ZeroAdamW::step(double max_norm) {
  State& s = *s_;
  if (!(max_norm >= 0.0)) fail("ZeroAdamW.step", "max_norm must be non-negative, got ", max_norm);
  NoGradGuard no_grad;
  // 1. Local gradients end to end (zeros for missing ones and the padding), then reduce-scatter.
  std::fill(s.flat.begin() + s.n, s.flat.end(), 0.0f);
  for (std::size_t k = 0; k < s.params.size(); ++k)
    detail::copy_grad_or_zeros(s.params[k], s.flat.data() + s.offset[k]);
  s.comm.reduce_scatter_raw(s.flat.data(), s.grad_shard.data(), s.shard, ReduceOp::Avg);

  // 2. The global norm: each rank's sum of squares in double, gathered bit for bit (a double
  // travels as two floats' bytes) and added in rank order.
  const int64_t mine = s.end - s.begin;
  double sq = attn::detail::sum_of_squares_host(s.grad_shard.data(), mine);
  std::vector<double> all(std::size_t(s.comm.size()));
  s.comm.all_gather_raw(reinterpret_cast<const float*>(&sq), reinterpret_cast<float*>(all.data()),
                        2);
  double total_sq = 0.0;
  for (double v : all) total_sq += v;
  const double total = std::sqrt(total_sq);
  if (max_norm > 0) {
    const double coef = std::fmin(max_norm / (total + 1e-6), 1.0);
    if (coef < 1.0 || std::isnan(coef))
      attn::detail::scale_host(s.grad_shard.data(), mine, float(coef));
  }

  // 3. AdamW on this rank's shard, piece by piece (each piece lies in one parameter, whose
  // group gives the weight decay), updating the parameters' own memory.
  s.step += 1;
  s.for_pieces(s.begin, s.end, [&](std::size_t k, int64_t within, int64_t at, int64_t count) {
    const int64_t i = at - s.begin;
    float* p = s.params[k].data_ptr<float>() + within;
    attn::detail::adamw_update_host(p, s.grad_shard.data() + i, s.exp_avg.data() + i,
                                    s.exp_avg_sq.data() + i, count, s.step, s.options.lr,
                                    s.options.beta1, s.options.beta2, s.options.eps, s.decay[k]);
    std::memcpy(s.value_shard.data() + i, p, std::size_t(count) * sizeof(float));
  });

  // 4. Every rank's updated shard into every rank's parameters.
  s.comm.all_gather_raw(s.value_shard.data(), s.flat.data(), s.shard);
  for (std::size_t k = 0; k < s.params.size(); ++k) {
    std::memcpy(s.params[k].data_ptr<float>(), s.flat.data() + s.offset[k],
                std::size_t(s.params[k].numel()) * sizeof(float));
    attn::detail::bump_version(s.params[k]);
  }
  return total;
}

nn::NamedTensors ZeroAdamW::state_dict() {
  State& s = *s_;
  nn::NamedTensors out;
  if (s.step == 0) return out;  // no state yet, as optim::AdamW before its first step
  std::vector<float> m(s.flat.size()), v(s.flat.size());
  s.comm.all_gather_raw(s.exp_avg.data(), m.data(), s.shard);
  s.comm.all_gather_raw(s.exp_avg_sq.data(), v.data(), s.shard);
  for (std::size_t k = 0; k < s.params.size(); ++k) {
    const Shape& shape = s.params[k].shape();
    const int64_t count = s.params[k].numel();
    auto piece = [&](const std::vector<float>& src) {
      return from_vector(
          std::vector<float>(src.begin() + s.offset[k], src.begin() + s.offset[k] + count), shape);
    };
    const std::string prefix = "state." + std::to_string(k) + ".";
    out.emplace_back(prefix + "exp_avg", piece(m));
    out.emplace_back(prefix + "exp_avg_sq", piece(v));
    out.emplace_back(prefix + "step", tensor(NestedList(s.step), Dtype::Int64));
  }
  return out;
}

void ZeroAdamW::load_state_dict(const nn::NamedTensors& state) {
  State& s = *s_;
  // optim::AdamW checks names, shapes and completeness.
  std::vector<optim::ParamGroup> one{optim::ParamGroup{s.params, 0.0}};
  optim::AdamW check(one, s.options);
  check.load_state_dict(state);
  std::vector<int64_t> steps;
  std::vector<float> m(std::size_t(s.shard), 0.0f), v(std::size_t(s.shard), 0.0f);
  std::vector<const Tensor*> ms(s.params.size(), nullptr), vs(s.params.size(), nullptr);
  for (const auto& [name, t] : state) {
    const auto dot = name.find('.', 6);
    const std::size_t k = std::stoul(name.substr(6, dot - 6));
    const std::string field = name.substr(dot + 1);
    if (field == "step")
      steps.push_back(t.contiguous().data_ptr<int64_t>()[0]);
    else if (field == "exp_avg")
      ms[k] = &t;
    else
      vs[k] = &t;
  }
  if (state.empty()) {
    s.step = 0;
    std::fill(s.exp_avg.begin(), s.exp_avg.end(), 0.0f);
    std::fill(s.exp_avg_sq.begin(), s.exp_avg_sq.end(), 0.0f);
    return;
  }
  for (std::size_t k = 0; k < s.params.size(); ++k)
    if (!ms[k])
      fail("ZeroAdamW.load_state_dict", "no state for parameter ", k,
           ": the sharded optimizer needs the state of every parameter");
  for (int64_t st : steps)
    if (st != steps.front())
      fail("ZeroAdamW.load_state_dict", "the parameters' step counts differ (", steps.front(),
           " and ", st, "): the sharded optimizer keeps one step count");
  s.for_pieces(s.begin, s.end, [&](std::size_t k, int64_t within, int64_t at, int64_t count) {
    const Tensor a = ms[k]->contiguous(), b = vs[k]->contiguous();
    std::memcpy(m.data() + (at - s.begin), a.data_ptr<float>() + within,
                std::size_t(count) * sizeof(float));
    std::memcpy(v.data() + (at - s.begin), b.data_ptr<float>() + within,
                std::size_t(count) * sizeof(float));
  });
  s.exp_avg = std::move(m);
  s.exp_avg_sq = std::move(v);
  s.step = steps.front();
}

}  // namespace attn::distributed
