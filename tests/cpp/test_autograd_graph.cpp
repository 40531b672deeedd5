// The autograd graph (include/attn/autograd.h): which node each op records, how requires_grad
// propagates, NoGradGuard, detach(), in-place ops on leaves, and how results print.
//
// The expected node names are what PyTorch 1.13 prints for the same Python expression
// (`type(t.grad_fn).__name__`), except where PyTorch 2.x, which printed the seed documents,
// names the node differently; those cases say so.
#include <attn/attn.h>
#include <attn/autograd.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace attn {
namespace {

using indexing::Ellipsis;
using indexing::None;
using indexing::Slice;

// The name of t's grad_fn, "None" for a tensor without one (as Python prints it).
std::string node(const Tensor& t) {
  std::shared_ptr<Node> fn = grad_fn(t);
  return fn ? fn->name : "None";
}

bool is_leaf(const Tensor& t) { return grad_fn(t) == nullptr; }

// Tensors shaped like the seeds' weights: w, m require grad (trainable), p does not.
class AutogradGraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_grad_enabled(true);
    manual_seed(0);
    w = rand({3, 2}).requires_grad_();
    m = rand({2, 3}).requires_grad_();
    v = rand({3}).requires_grad_();
    v2 = rand({2}).requires_grad_();
    b3 = rand({4, 3, 2}).requires_grad_();
    p = rand({3, 2});
  }
  void TearDown() override { set_grad_enabled(true); }

  Tensor w, m, v, v2, b3, p;
};

struct Case {
  const char* python;  // the PyTorch expression
  Tensor result;
  const char* expected;
};

void expect_nodes(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    EXPECT_EQ(node(c.result), c.expected) << c.python;
    EXPECT_TRUE(c.result.requires_grad()) << c.python;
  }
}

// ---- node names
// -----------------------------------------------------------------------------------

TEST_F(AutogradGraphTest, MatmulVariants) {
  expect_nodes({
      {"w @ m", matmul(w, m), "MmBackward0"},
      {"m @ v", matmul(m, v), "MvBackward0"},
      {"v.dot(v)", v.dot(v), "DotBackward0"},
      {"v @ v", matmul(v, v), "DotBackward0"},
      // torch 1.13 prints SqueezeBackward3; torch 2.x (and the seed documents, e.g. seed 000's
      // omega_2 = query_2 @ keys.T) print SqueezeBackward4, which attn follows.
      {"v @ w", matmul(v, w), "SqueezeBackward4"},
      {"b3 @ m", matmul(b3, m), "UnsafeViewBackward0"},
      {"b3 @ b3.transpose(-2, -1)", matmul(b3, b3.transpose(-2, -1)), "UnsafeViewBackward0"},
      {"b3 @ v2", matmul(b3, v2), "UnsafeViewBackward0"},
      {"v @ b3", matmul(v, b3), "UnsafeViewBackward0"},
      // A 2-D operand that requires grad times a batch: folded into one mm, transposed back and
      // made contiguous (a clone), unless the transposed result is already contiguous.
      {"m @ torch.rand(4, 3, 2)", matmul(m, rand({4, 3, 2})), "CloneBackward0"},
      {"m @ torch.rand(5, 4, 3, 2)", matmul(m, rand({5, 4, 3, 2})), "CloneBackward0"},
      {"m[:1] @ torch.rand(4, 3, 2)", matmul(m.index({Slice(None, 1)}), rand({4, 3, 2})),
       "TransposeBackward0"},
      {"m @ torch.rand(4, 3, 1)", matmul(m, rand({4, 3, 1})), "TransposeBackward0"},
  });
}

TEST_F(AutogradGraphTest, ArithmeticWithTensorsAndScalars) {
  expect_nodes({
      {"w + p", w + p, "AddBackward0"},
      {"w - p", w - p, "SubBackward0"},
      {"w * p", w * p, "MulBackward0"},
      {"w / p", w / p, "DivBackward0"},
      {"p + w", p + w, "AddBackward0"},
      {"w + 1", w + 1, "AddBackward0"},
      {"w - 1", w - 1, "SubBackward0"},
      {"w * 2", w * 2, "MulBackward0"},
      {"w / 2", w / 2, "DivBackward0"},
      {"1 + w", 1 + w, "AddBackward0"},
      {"1 - w", 1 - w, "RsubBackward1"},
      {"2 * w", 2 * w, "MulBackward0"},
      {"2 / w", 2 / w, "MulBackward0"},  // Python: w.reciprocal() * 2
      {"-w", -w, "NegBackward0"},
      {"w.neg()", w.neg(), "NegBackward0"},
      {"w ** 2", w.pow(2), "PowBackward0"},
      {"w ** p", w.pow(p), "PowBackward1"},
      {"torch.pow(2, w)", pow(2, w), "PowBackward2"},
      {"torch.maximum(w, p)", maximum(w, p), "MaximumBackward0"},
      {"torch.minimum(w, p)", minimum(w, p), "MinimumBackward0"},
      {"torch.where(p > 0.5, w, p)", where(p > 0.5, w, p), "WhereBackward0"},
      {"w.masked_fill(p > 0.5, 0.0)", w.masked_fill(p > 0.5, 0.0), "MaskedFillBackward0"},
  });
}

TEST_F(AutogradGraphTest, UnaryOps) {
  expect_nodes({
      {"w.exp()", w.exp(), "ExpBackward0"},
      {"w.log()", w.log(), "LogBackward0"},
      {"w.sqrt()", w.sqrt(), "SqrtBackward0"},
      {"w.rsqrt()", w.rsqrt(), "RsqrtBackward0"},
      {"w.abs()", w.abs(), "AbsBackward0"},
      {"w.tanh()", w.tanh(), "TanhBackward0"},
      {"w.sigmoid()", w.sigmoid(), "SigmoidBackward0"},
      {"w.relu()", w.relu(), "ReluBackward0"},
      {"w.ceil()", w.ceil(), "CeilBackward0"},
      {"w.floor()", w.floor(), "FloorBackward0"},
  });
}

TEST_F(AutogradGraphTest, ReductionsAndSoftmax) {
  expect_nodes({
      {"w.sum()", w.sum(), "SumBackward0"},
      {"w.sum(-1)", w.sum({-1}), "SumBackward1"},
      {"w.sum(-1, keepdim=True)", w.sum({-1}, true), "SumBackward1"},
      {"w.mean()", w.mean(), "MeanBackward0"},
      {"w.mean(0)", w.mean({0}), "MeanBackward1"},
      {"w.var()", w.var(), "VarBackward0"},
      {"w.var(0)", w.var(Shape{0}), "VarBackward0"},
      {"w.max()", w.max(), "MaxBackward1"},
      {"w.min()", w.min(), "MinBackward1"},
      {"w.max(1).values", std::get<0>(w.max(1)), "MaxBackward0"},
      {"w.min(1).values", std::get<0>(w.min(1)), "MinBackward0"},
      {"w.softmax(-1)", w.softmax(-1), "SoftmaxBackward0"},
      {"F.softmax(w, dim=0)", nn::functional::softmax(w, 0), "SoftmaxBackward0"},
      {"w.log_softmax(-1)", w.log_softmax(-1), "LogSoftmaxBackward0"},
  });
  // Integer results (indices) never require grad.
  EXPECT_FALSE(std::get<1>(w.max(1)).requires_grad());
  EXPECT_EQ(node(std::get<1>(w.max(1))), "None");
  EXPECT_FALSE(w.argmax(1).requires_grad());
}

// Only float32 tensors take part in the graph: conversions to int64 or bool leave it.
TEST_F(AutogradGraphTest, IntegerAndBoolConversionsLeaveTheGraph) {
  for (const Tensor& t : {w.long_(), w.bool_(), w.to(Dtype::Int64), (w * 2).long_()}) {
    EXPECT_FALSE(t.requires_grad()) << t.repr();
    EXPECT_EQ(node(t), "None");
    EXPECT_EQ(t.repr().find("grad"), std::string::npos) << t.repr();
  }
  EXPECT_TRUE(w.to(Dtype::Float32).is_same(w));  // no conversion: the tensor itself
  EXPECT_THROW(ones({2}, Dtype::Int64).requires_grad_(), Error);
}

TEST_F(AutogradGraphTest, CopiesAndConstruction) {
  Tensor sq = rand({3, 3}).requires_grad_();
  expect_nodes({
      {"w.clone()", w.clone(), "CloneBackward0"},
      {"w.T.contiguous()", w.T().contiguous(), "CloneBackward0"},
      {"torch.tril(sq)", tril(sq), "TrilBackward0"},
      {"sq.tril(-1)", sq.tril(-1), "TrilBackward0"},
      {"sq.triu(1)", sq.triu(1), "TriuBackward0"},
      {"torch.rand(2, 3, 4, requires_grad=True).tril()", rand({2, 3, 4}).requires_grad_().tril(),
       "TrilBackward0"},
      {"torch.cat([w, p])", cat({w, p}), "CatBackward0"},
      {"torch.stack([w, p])", stack({w, p}), "StackBackward0"},
      {"torch.stack([w, w], 1)", stack({w, w}, 1), "StackBackward0"},
  });
  // contiguous() of a contiguous tensor is the tensor itself: still the leaf.
  EXPECT_TRUE(w.contiguous().is_same(w));
  EXPECT_EQ(node(w.contiguous()), "None");
}

// Views of a leaf are not leaves: each records its view node, and shares the leaf's storage.
TEST_F(AutogradGraphTest, ViewsOfALeafGetViewNodes) {
  const std::vector<Case> views = {
      {"w[1]", w[1], "SelectBackward0"},
      {"w.select(1, 0)", w.select(1, 0), "SelectBackward0"},
      {"w.transpose(0, 1)", w.transpose(0, 1), "TransposeBackward0"},
      {"w.transpose(0, 0)", w.transpose(0, 0), "TransposeBackward0"},
      {"w.T", w.T(), "PermuteBackward0"},
      {"b3.permute(2, 1, 0)  (b3.T)", b3.T(), "PermuteBackward0"},
      {"w.mT", w.mT(), "TransposeBackward0"},
      {"b3.permute(1, 0, 2)", b3.permute({1, 0, 2}), "PermuteBackward0"},
      {"w[1:]", w.index({Slice(1)}), "SliceBackward0"},
      {"w[:]", w.index({Slice()}), "SliceBackward0"},
      {"w.narrow(0, 0, 2)", w.narrow(0, 0, 2), "SliceBackward0"},
      {"b3[0, :1]", b3.index({0, Slice(None, 1)}), "SliceBackward0"},
      {"w[None]", w.index({None}), "UnsqueezeBackward0"},
      {"w[...]", w.index({Ellipsis}), "AliasBackward0"},
      {"w.view(6)", w.view({6}), "ViewBackward0"},
      {"w.view(3, 2)", w.view({3, 2}), "ViewBackward0"},
      // A viewable reshape (and flatten, which reshapes): PyTorch 2.x records a view,
      // ViewBackward0; torch 1.13 printed ReshapeAliasBackward0, its internal _reshape_alias.
      {"w.reshape(6)", w.reshape({6}), "ViewBackward0"},
      {"w.flatten()", w.flatten(), "ViewBackward0"},
      {"w.unsqueeze(0)", w.unsqueeze(0), "UnsqueezeBackward0"},
      {"w.squeeze()", w.squeeze(), "SqueezeBackward0"},
      {"w.squeeze(0)", w.squeeze(0), "SqueezeBackward1"},
      {"w.unsqueeze(0).squeeze(0)", w.unsqueeze(0).squeeze(0), "SqueezeBackward1"},
      {"v.expand(2, 3)", v.expand({2, 3}), "ExpandBackward0"},
  };
  expect_nodes(views);
  for (const Case& c : views) {
    EXPECT_FALSE(is_leaf(c.result)) << c.python;
    EXPECT_TRUE(c.result.impl()->storage == w.impl()->storage ||
                c.result.impl()->storage == b3.impl()->storage ||
                c.result.impl()->storage == v.impl()->storage)
        << c.python << " must stay a view";
    // The view's node (after the nodes of any views it was taken from, as in b3[0, :1]) points
    // back at the leaf.
    std::shared_ptr<Node> n = grad_fn(c.result);
    while (n && n->leaves.empty() && n->next.size() == 1) n = n->next[0];
    ASSERT_TRUE(n) << c.python;
    ASSERT_EQ(n->leaves.size(), 1u) << c.python;
    EXPECT_TRUE(n->next.empty()) << c.python;
  }
  EXPECT_TRUE(grad_fn(w[1])->leaves[0] == w.impl());
  Tensor sliced = b3.index({0, Slice(None, 1)});
  ASSERT_EQ(grad_fn(sliced)->next.size(), 1u);
  EXPECT_EQ(grad_fn(sliced)->next[0]->name, "SelectBackward0");
  EXPECT_TRUE(grad_fn(sliced)->next[0]->leaves[0] == b3.impl());
  // A reshape that cannot be a view copies: PyTorch's _unsafe_view of a clone.
  Tensor copied = w.T().reshape({6});
  EXPECT_EQ(node(copied), "UnsafeViewBackward0");
  ASSERT_EQ(grad_fn(copied)->next.size(), 1u);
  EXPECT_EQ(grad_fn(copied)->next[0]->name, "CloneBackward0");
  EXPECT_FALSE(copied.impl()->storage == w.impl()->storage);
}

TEST_F(AutogradGraphTest, ViewsOfResultsChainTheirNodes) {
  Tensor y = matmul(w, m);  // (3, 3), MmBackward0
  Tensor row = y[0];
  EXPECT_EQ(node(row), "SelectBackward0");
  ASSERT_EQ(grad_fn(row)->next.size(), 1u);
  EXPECT_EQ(grad_fn(row)->next[0], grad_fn(y));
  EXPECT_TRUE(grad_fn(row)->leaves.empty());
}

// ---- the graph's edges
// ------------------------------------------------------------------------------

TEST_F(AutogradGraphTest, NodesPointAtTheirInputs) {
  Tensor y = matmul(w, m);
  std::shared_ptr<Node> mm = grad_fn(y);
  ASSERT_TRUE(mm);
  EXPECT_TRUE(mm->next.empty());
  ASSERT_EQ(mm->leaves.size(), 2u);
  EXPECT_TRUE(mm->leaves[0] == w.impl());
  EXPECT_TRUE(mm->leaves[1] == m.impl());

  Tensor s = y.sum();
  ASSERT_EQ(grad_fn(s)->next.size(), 1u);
  EXPECT_EQ(grad_fn(s)->next[0], mm);
  EXPECT_TRUE(grad_fn(s)->leaves.empty());

  // Inputs that do not require grad are not part of the graph.
  Tensor q = w * p;
  ASSERT_EQ(grad_fn(q)->leaves.size(), 1u);
  EXPECT_TRUE(grad_fn(q)->leaves[0] == w.impl());
  EXPECT_TRUE(grad_fn(q)->next.empty());

  // A result and a leaf together.
  Tensor mixed = matmul(y, w) + w;
  EXPECT_EQ(node(mixed), "AddBackward0");
  ASSERT_EQ(grad_fn(mixed)->next.size(), 1u);
  EXPECT_EQ(grad_fn(mixed)->next[0]->name, "MmBackward0");
  ASSERT_EQ(grad_fn(mixed)->leaves.size(), 1u);
  EXPECT_TRUE(grad_fn(mixed)->leaves[0] == w.impl());
}

TEST_F(AutogradGraphTest, SeedStyleAttentionChain) {
  // Seed 003's SelfAttention_v1 by hand: the output's node is the last op, and walking `next`
  // from it goes back through softmax, the division and the score product.
  Tensor inputs = rand({6, 3});
  Tensor W_query = rand({3, 2}).requires_grad_(), W_key = rand({3, 2}).requires_grad_(),
         W_value = rand({3, 2}).requires_grad_();
  Tensor keys = matmul(inputs, W_key), queries = matmul(inputs, W_query),
         values = matmul(inputs, W_value);
  Tensor scores = matmul(queries, keys.T());
  Tensor weights = softmax(scores / std::sqrt(2.0), -1);
  Tensor context = matmul(weights, values);
  EXPECT_EQ(node(context), "MmBackward0");
  std::vector<std::string> chain;
  for (std::shared_ptr<Node> n = grad_fn(context); n; n = n->next.empty() ? nullptr : n->next[0])
    chain.push_back(n->name);
  EXPECT_EQ(chain, (std::vector<std::string>{"MmBackward0", "SoftmaxBackward0", "DivBackward0",
                                             "MmBackward0", "MmBackward0"}));
  EXPECT_TRUE(is_leaf(W_query));
}

// ---- requires_grad propagation ------------------------------------------------------------------

TEST_F(AutogradGraphTest, LeavesRequireGradAndHaveNoNode) {
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(is_leaf(w));
  EXPECT_FALSE(p.requires_grad());
  EXPECT_TRUE(is_leaf(p));
  Tensor y = w * 2;
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(is_leaf(y));
  // requires_grad_(false) on a leaf: later results are plain tensors again.
  w.requires_grad_(false);
  EXPECT_EQ(node(w * 2), "None");
  EXPECT_FALSE((w * 2).requires_grad());
}

TEST_F(AutogradGraphTest, OpsOnPlainTensorsRecordNothing) {
  Tensor a = rand({3, 3}), b = rand({3});
  const std::vector<Tensor> results = {
      matmul(a, a),   matmul(b, a),
      a + a,          a * 2,
      2 / a,          a.exp(),
      a.sum(),        a.mean({0}),
      a.var(),        softmax(a, -1),
      tril(a),        a.T(),
      a[0],           a.view({9}),
      a.reshape({9}), cat({a, a}),
      stack({a, a}),  a.masked_fill(a > 0.5, 0.0),
      a.clone(),      where(a > 0.5, a, a),
      a.unsqueeze(0), a.index({Slice(1)}),
  };
  for (std::size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(node(results[i]), "None") << "result " << i;
    EXPECT_FALSE(results[i].requires_grad()) << "result " << i;
    EXPECT_EQ(results[i].repr().find("grad"), std::string::npos) << results[i].repr();
  }
  // Comparisons give bool tensors, which never require grad, even from trainable inputs.
  for (const Tensor& t : {w == p, w > 0.5, w != w, w.isnan()}) {
    EXPECT_FALSE(t.requires_grad());
    EXPECT_EQ(node(t), "None");
  }
}

TEST_F(AutogradGraphTest, TrainableWeightsOfTheNnClasses) {
  manual_seed(123);
  nn::SelfAttentionV1 trainable(3, 2);  // seed 003: nn.Parameter(torch.rand(d_in, d_out))
  EXPECT_TRUE(trainable.W_query.requires_grad());
  EXPECT_TRUE(is_leaf(trainable.W_query));
  Tensor inputs = rand({6, 3});
  EXPECT_EQ(node(trainable(inputs)), "MmBackward0");
  EXPECT_EQ(node(trainable.attention_weights(inputs)), "SoftmaxBackward0");

  nn::SelfAttentionV1 frozen(3, 2, nn::Init::Randn, /*requires_grad=*/false);  // seed 002
  EXPECT_FALSE(frozen.W_query.requires_grad());
  EXPECT_EQ(node(frozen(inputs)), "None");
  EXPECT_EQ(frozen(inputs).repr().find("grad"), std::string::npos);

  nn::Linear no_bias(2, 4, /*bias=*/false);  // seed 004's key, query, value
  EXPECT_TRUE(no_bias.weight.requires_grad());
  EXPECT_EQ(node(no_bias(p)), "MmBackward0");
  EXPECT_EQ(node(no_bias(rand({4, 3, 2}))), "UnsafeViewBackward0");

  nn::Head head(8, 4, /*causal=*/true);
  EXPECT_EQ(node(head.attention_weights(rand({2, 5, 8}))), "SoftmaxBackward0");

  Tensor y = w * 1;
  EXPECT_EQ(node(nn::functional::dropout(y, 0.2, /*training=*/true)), "MulBackward0");
  EXPECT_TRUE(nn::functional::dropout(y, 0.2, /*training=*/false).is_same(y));
}

// ---- NoGradGuard --------------------------------------------------------------------------------

TEST_F(AutogradGraphTest, NoGradGuardDisablesRecording) {
  EXPECT_TRUE(is_grad_enabled());
  {
    NoGradGuard guard;
    EXPECT_FALSE(is_grad_enabled());
    for (const Tensor& t :
         {matmul(w, m), w * 2, w.sum(), softmax(w, -1), w[0], w.T(), w.view({6}), tril(m.T())}) {
      EXPECT_EQ(node(t), "None");
      EXPECT_FALSE(t.requires_grad());
      EXPECT_EQ(t.repr().find("grad"), std::string::npos) << t.repr();
    }
    // The leaf itself still requires grad, and may be changed in place (as torch.no_grad()
    // allows, e.g. for an optimizer step).
    EXPECT_TRUE(w.requires_grad());
    Tensor before = w.clone();
    EXPECT_NO_THROW(w.add_(1.0));
    EXPECT_TRUE(allclose(w, before + 1.0));
    EXPECT_TRUE(is_leaf(w));
    {
      NoGradGuard nested;
      EXPECT_FALSE(is_grad_enabled());
    }
    EXPECT_FALSE(is_grad_enabled()) << "a nested guard restores the outer state";
  }
  EXPECT_TRUE(is_grad_enabled());
  EXPECT_EQ(node(matmul(w, m)), "MmBackward0");
}

TEST_F(AutogradGraphTest, SetGradEnabledAndThreadLocality) {
  set_grad_enabled(false);
  EXPECT_EQ(node(w * 2), "None");
  bool other_thread_enabled = false;
  std::string other_thread_node;
  std::thread t([&] {
    other_thread_enabled = is_grad_enabled();
    other_thread_node = node(w * 2);
  });
  t.join();
  EXPECT_TRUE(other_thread_enabled) << "grad mode is per thread, as in PyTorch";
  EXPECT_EQ(other_thread_node, "MulBackward0");
  set_grad_enabled(true);
  EXPECT_EQ(node(w * 2), "MulBackward0");
  {
    set_grad_enabled(false);
    NoGradGuard guard;  // restores "disabled"
  }
  EXPECT_FALSE(is_grad_enabled());
}

// ---- detach
// ---------------------------------------------------------------------------------------

TEST_F(AutogradGraphTest, DetachCutsTheGraph) {
  Tensor y = matmul(w, m);
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(node(d), "None");
  EXPECT_TRUE(d.impl()->storage == y.impl()->storage) << "detach shares storage";
  EXPECT_EQ(node(y), "MmBackward0") << "the original keeps its node";
  // Results computed from the detached tensor do not reach w or m ...
  EXPECT_EQ(node(d * 2), "None");
  EXPECT_FALSE((d * 2).requires_grad());
  // ... unless another input requires grad: then only that input is in the graph.
  Tensor e = matmul(d, w);
  EXPECT_EQ(node(e), "MmBackward0");
  ASSERT_EQ(grad_fn(e)->leaves.size(), 1u);
  EXPECT_TRUE(grad_fn(e)->leaves[0] == w.impl());
  EXPECT_TRUE(grad_fn(e)->next.empty());
  // Seed 000: embed(sentence_int).detach() is a plain tensor.
  manual_seed(123);
  nn::Embedding embed(10, 3);
  Tensor embedded = embed(tensor({0, 4, 5})).detach();
  EXPECT_FALSE(embedded.requires_grad());
  EXPECT_EQ(embedded.repr().find("grad"), std::string::npos);
  // Detaching a leaf gives a tensor that can become a new, independent leaf.
  Tensor fresh = w.detach().requires_grad_();
  EXPECT_TRUE(fresh.requires_grad());
  EXPECT_TRUE(grad_fn(fresh * 2)->leaves[0] == fresh.impl());
  EXPECT_FALSE(grad_fn(fresh * 2)->leaves[0] == w.impl());
}

// ---- in-place ops -------------------------------------------------------------------------------

// `op` must throw attn::Error naming the in-place op ("[add_]") and the leaf rule.
void expect_leaf_error(const std::function<void()>& op, const std::string& node_name) {
  try {
    op();
    ADD_FAILURE() << node_name << ": expected attn::Error for an in-place op on a leaf";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(node_name), std::string::npos) << what;
    EXPECT_NE(what.find("leaf"), std::string::npos) << what;
    EXPECT_NE(what.find("in-place"), std::string::npos) << what;
  }
}

TEST_F(AutogradGraphTest, InPlaceOpOnALeafThatRequiresGradThrows) {
  expect_leaf_error([&] { w.add_(1.0); }, "[add_]");
  expect_leaf_error([&] { w += p; }, "[add_]");
  expect_leaf_error([&] { w.sub_(p); }, "[sub_]");
  expect_leaf_error([&] { w *= 2.0; }, "[mul_]");
  expect_leaf_error([&] { w.div_(p); }, "[div_]");
  expect_leaf_error([&] { w.masked_fill_(p > 0.5, 0.0); }, "[masked_fill_]");
  expect_leaf_error([&] { w.copy_(w * 2); }, "[copy_]");
  EXPECT_TRUE(is_leaf(w));
  EXPECT_TRUE(w.requires_grad());
}

// PyTorch checks before writing; attn currently writes the leaf's values, then throws.
TEST_F(AutogradGraphTest, FailedInPlaceOpLeavesTheLeafUnchanged) {
  Tensor before = w.clone();
  EXPECT_THROW(w.add_(1.0), Error);
  EXPECT_TRUE(equal(w.detach(), before.detach()));
}

TEST_F(AutogradGraphTest, InPlaceOpsOnResultsRecordTheirNode) {
  {
    Tensor x = w * 1;
    x += 1;
    EXPECT_EQ(node(x), "AddBackward0");
    ASSERT_EQ(grad_fn(x)->next.size(), 1u);
    EXPECT_EQ(grad_fn(x)->next[0]->name, "MulBackward0");
  }
  {
    Tensor x = w * 1;
    x -= p;
    EXPECT_EQ(node(x), "SubBackward0");
  }
  {
    Tensor x = w * 1;
    x *= 2;
    EXPECT_EQ(node(x), "MulBackward0");
  }
  {
    Tensor x = w * 1;
    x /= 2;
    EXPECT_EQ(node(x), "DivBackward0");
  }
  {
    // Seed 003's CausalAttention: attn_scores.masked_fill_(mask, -inf) on a non-leaf.
    Tensor scores = matmul(w, m);
    scores.masked_fill_(triu(ones({3, 3}), 1).bool_(), -inf);
    EXPECT_EQ(node(scores), "MaskedFillBackward0");
    EXPECT_EQ(grad_fn(scores)->next[0]->name, "MmBackward0");
  }
  {
    // Seed 004: weights *= head_size ** -0.5 after q @ k.transpose(-2, -1).
    Tensor weights = matmul(b3, b3.transpose(-2, -1));
    weights *= std::pow(16.0, -0.5);
    EXPECT_EQ(node(weights), "MulBackward0");
    EXPECT_EQ(grad_fn(weights)->next[0]->name, "UnsafeViewBackward0");
  }
  {
    // A plain tensor that absorbs a trainable one joins the graph.
    Tensor x = p.clone();
    x += w;
    EXPECT_TRUE(x.requires_grad());
    EXPECT_EQ(node(x), "AddBackward0");
    Tensor c = p.clone();
    c.copy_(w);
    EXPECT_EQ(node(c), "CopyBackwards");
  }
  {
    // In-place ops on plain tensors with plain operands record nothing.
    Tensor x = p.clone();
    x += 1;
    x.masked_fill_(x > 1.5, 0.0);
    EXPECT_EQ(node(x), "None");
    EXPECT_FALSE(x.requires_grad());
  }
}

// ---- printing
// ---------------------------------------------------------------------------------------

TEST_F(AutogradGraphTest, ReprShowsRequiresGradForLeavesAndGradFnForResults) {
  // The same strings as torch.manual_seed(0); w = torch.rand(3, 2, requires_grad=True).
  EXPECT_EQ(w.repr(),
            "tensor([[0.4963, 0.7682],\n"
            "        [0.0885, 0.1320],\n"
            "        [0.3074, 0.6341]], requires_grad=True)");
  EXPECT_EQ((w * 2).repr(),
            "tensor([[0.9925, 1.5364],\n"
            "        [0.1770, 0.2641],\n"
            "        [0.6148, 1.2682]], grad_fn=<MulBackward0>)");
  EXPECT_EQ(w.sum().repr(), "tensor(2.4265, grad_fn=<SumBackward0>)");
  EXPECT_EQ(w[0].repr(), "tensor([0.4963, 0.7682], grad_fn=<SelectBackward0>)");
  EXPECT_EQ(w.T().repr(),
            "tensor([[0.4963, 0.0885, 0.3074],\n"
            "        [0.7682, 0.1320, 0.6341]], grad_fn=<PermuteBackward0>)");
  const std::string plain =
      "tensor([[0.4963, 0.7682],\n"
      "        [0.0885, 0.1320],\n"
      "        [0.3074, 0.6341]])";
  EXPECT_EQ(w.detach().repr(), plain);
  {
    NoGradGuard guard;
    EXPECT_EQ((w * 2).detach().repr(), (w * 2).repr());
    EXPECT_EQ((w * 2).repr().find("grad"), std::string::npos);
  }
  // A suffix that does not fit on the last line goes on its own line, aligned after "tensor(".
  manual_seed(0);
  Tensor u = rand({6}).requires_grad_();
  EXPECT_EQ(softmax(u * 10, 0).repr(),
            "tensor([0.0492, 0.7462, 0.0008, 0.0013, 0.0074, 0.1951],\n"
            "       grad_fn=<SoftmaxBackward0>)");
  // operator<< prints the same.
  std::ostringstream os;
  os << w * 2;
  EXPECT_EQ(os.str(), (w * 2).repr());
}

}  // namespace
}  // namespace attn
