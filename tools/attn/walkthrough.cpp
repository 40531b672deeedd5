// `attn walkthrough`: every computation of the five seed documents, step by step.
//
// Each seed is replayed with the library's public API and the same random seeds as the document,
// so the printed tensors are the document's own numbers, computed live. The format of the output
// is described in walkthrough.h; tests/cpp/test_walkthrough.cpp checks every printed result
// against the documents.
//
// Trainable weights are created as the documents create them (tensors that require grad, or
// parameters of the nn classes), so results computed from them print the autograd node that
// produced them ("grad_fn=<MmBackward0>"), from the graph the library records.
#include "walkthrough.h"

#include <attn/attn.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "heatmap.h"

namespace attn::tools {

namespace {

using indexing::None;
using indexing::Slice;

// ---- printing helpers ---------------------------------------------------------------------------

// Python's repr of torch.Size: "torch.Size([6, 3])".
std::string size_repr(const Tensor& t) {
  std::ostringstream s;
  s << "torch.Size([";
  for (std::size_t i = 0; i < t.shape().size(); ++i) s << (i ? ", " : "") << t.shape()[i];
  s << "])";
  return s.str();
}

// repr of a torch.nn.Parameter.
std::string param_repr(const Tensor& p) { return "Parameter containing:\n" + p.repr(); }

std::string py_bool(bool b) { return b ? "True" : "False"; }

// Writes the seed headers, numbered steps and results in the format of walkthrough.h.
class Walk {
 public:
  // With a non-empty plots_dir, plot() writes heatmaps there (see heatmap.h).
  explicit Walk(std::ostream& os, std::string plots_dir = "")
      : os_(os), plots_dir_(std::move(plots_dir)) {}

  void seed(const SeedInfo& info, const std::string& summary) {
    seed_id_ = info.id;
    if (seeds_++) os_ << "\n\n";
    os_ << kSeedPrefix << "Seed " << info.id << " (" << info.document << "): " << info.title << "\n"
        << summary << "\n";
    step_ = 0;
  }
  // A new step with its one-line explanation.
  void step(const std::string& text) {
    os_ << "\n" << kStepPrefix << ++step_ << ". " << text << "\n";
  }
  // A remark inside a step, before its results.
  void note(const std::string& text) { os_ << "   " << text << "\n"; }
  // A result the document prints: `text` occurs verbatim in it.
  void show(const std::string& expr, const std::string& text) { result(expr, "", text); }
  void show(const std::string& expr, const Tensor& t) { show(expr, t.repr()); }
  // A result the document does not print, shown to make the step visible.
  void extra(const std::string& expr, const std::string& text) { result(expr, kExtraTag, text); }
  void extra(const std::string& expr, const Tensor& t) { extra(expr, t.repr()); }
  // A result the document prints with values that cannot be reproduced.
  void differs(const std::string& expr, const Tensor& t) { result(expr, kDiffersTag, t.repr()); }
  // Attention weights shown above, as the heatmap plots_dir/seed<ID>_<name>.png (nothing is
  // printed; without a plots_dir nothing happens).
  void plot(const std::string& name, const Tensor& weights, const std::vector<std::string>& rows,
            const std::vector<std::string>& cols, const std::string& panel_prefix = "head") {
    if (plots_dir_.empty()) return;
    write_weights_heatmap(plots_dir_ + "/seed" + seed_id_ + "_" + name + ".png",
                          "seed " + seed_id_ + ": " + name, weights, rows, cols, panel_prefix);
  }

 private:
  void result(const std::string& expr, const std::string& tag, const std::string& text) {
    os_ << kResultPrefix << expr << (tag.empty() ? "" : "  ") << tag << "\n" << text << "\n";
  }
  std::ostream& os_;
  std::string plots_dir_, seed_id_;
  int seeds_ = 0;
  int step_ = 0;
};

// ---- seed 000: vocabulary, embeddings and one row of attention ----------------------------------

void seed_000(Walk& w) {
  const std::string sentence = "Life is short, eat dessert first";

  w.step(
      "Vocabulary: the sentence's words (comma dropped), sorted, each numbered by its position.");
  nn::Vocabulary dc(sentence);
  w.show("dc", dc.repr());

  w.step("Encode the sentence as the int64 tensor of its word ids, in sentence order.");
  Tensor sentence_int = dc.encode(sentence);
  w.show("sentence_int", sentence_int);

  w.step("Embed: seed 123, a 50000 x 3 table drawn from N(0, 1); row i is the vector of word i.");
  manual_seed(123);
  nn::Embedding embed(50000, 3);
  Tensor embedded_sentence = embed(sentence_int).detach();
  w.show("embedded_sentence", embedded_sentence);
  w.show("embedded_sentence.shape", size_repr(embedded_sentence));

  w.step(
      "Seed 123 again; trainable projections from U(0, 1): W_query, W_key 3 x 2, W_value 3 x 4.");
  manual_seed(123);
  const int64_t d = embedded_sentence.size(1);
  const int64_t d_q = 2, d_k = 2, d_v = 4;
  // torch.nn.Parameter(torch.rand(d, d_q)): a trainable tensor, one that requires grad.
  Tensor W_query = rand({d, d_q}).requires_grad_();
  Tensor W_key = rand({d, d_k}).requires_grad_();
  Tensor W_value = rand({d, d_v}).requires_grad_();
  w.note(
      "They require grad: results computed from them record their op, printed as grad_fn=<...>.");
  w.extra("W_query", param_repr(W_query));
  w.extra("W_key", param_repr(W_key));
  w.extra("W_value", param_repr(W_value));

  w.step("Project the second word x_2 ('is'): a 2-d query, a 2-d key and a 4-d value.");
  Tensor x_2 = embedded_sentence[1];
  Tensor query_2 = matmul(x_2, W_query);
  Tensor key_2 = matmul(x_2, W_key);
  Tensor value_2 = matmul(x_2, W_value);
  w.show("query_2.shape", size_repr(query_2));
  w.show("key_2.shape", size_repr(key_2));
  w.show("value_2.shape", size_repr(value_2));

  w.step("Project all six words at once: one key row and one value row per word.");
  Tensor keys = matmul(embedded_sentence, W_key);
  Tensor values = matmul(embedded_sentence, W_value);
  w.show("keys.shape", size_repr(keys));
  w.show("values.shape", size_repr(values));

  w.step("Unnormalised weight omega_24: how strongly x_2's query matches the fifth key.");
  Tensor omega_24 = query_2.dot(keys[4]);
  w.show("omega_24", omega_24);

  w.step("All of x_2's unnormalised weights in one product: omega_2 = query_2 @ keys.T.");
  Tensor omega_2 = matmul(query_2, keys.T());
  w.show("omega_2", omega_2);

  w.step("Normalise: softmax of omega_2 / sqrt(d_k); the six weights are positive and sum to 1.");
  Tensor attention_weights_2 = softmax(omega_2 / std::pow(double(d_k), 0.5), 0);
  w.show("attention_weights_2", attention_weights_2);
  w.plot("attention_weights_2", attention_weights_2, {"is"}, nn::Vocabulary::tokenize(sentence));

  w.step("Context vector of x_2: the values averaged with those weights (4-d, like a value).");
  Tensor context_vector_2 = matmul(attention_weights_2, values);
  w.show("context_vector_2.shape", size_repr(context_vector_2));
  w.show("context_vector_2", context_vector_2);
}

// ---- seed 001: multi-head attention in 13 steps -------------------------------------------------

void seed_001(Walk& w) {
  w.step("The input: a batch of one sentence ('the kid smiles'), 3 tokens of 6 features.");
  Tensor x = tensor({{{1.0, 2.0, 3.0, 4.0, 5.0, 6.0},
                      {6.0, 5.0, 4.0, 3.0, 2.0, 1.0},
                      {1.0, 1.0, 1.0, 1.0, 1.0, 1.0}}});
  w.show("x.shape", size_repr(x));
  const int64_t batch_size = x.size(0), seq_len = x.size(1), d_model = x.size(2);

  w.step("Choose d_out = 6 (same as the input) and 2 heads, so each head works in 6 / 2 = 3 dims.");
  const int64_t d_out = 6, num_heads = 2, head_dim = d_out / num_heads;
  w.extra("(d_out, num_heads, head_dim)", "(" + std::to_string(d_out) + ", " +
                                              std::to_string(num_heads) + ", " +
                                              std::to_string(head_dim) + ")");

  w.step("Seed 0; three 6 x 6 projection matrices Wq, Wk, Wv drawn from N(0, 1).");
  manual_seed(0);
  Tensor Wq = randn({d_model, d_model});
  Tensor Wk = randn({d_model, d_model});
  Tensor Wv = randn({d_model, d_model});
  w.extra("Wq", Wq);
  // The library's step-by-step helper runs steps 4 to 13 (dropout 0.1 draws from the default
  // generator, right after the three randn calls, as in the document).
  nn::MultiHeadSteps s =
      nn::multi_head_attention_steps(x, Wq, Wk, Wv, num_heads, 0.1, /*causal=*/true);

  w.step("Project every token: Q = x @ Wq, K = x @ Wk, V = x @ Wv, each (1, 3, 6).");
  w.show("Q", s.Q);
  w.show("K", s.K);
  w.show("V", s.V);

  w.step(
      "Unroll the last dim into (num_heads, head_dim): (1, 3, 6) -> (1, 3, 2, 3), grouped by "
      "token.");
  w.show("Q.view(1, 3, 2, 3)", s.Q.view({batch_size, seq_len, num_heads, head_dim}));
  w.show("K.view(1, 3, 2, 3)", s.K.view({batch_size, seq_len, num_heads, head_dim}));
  w.show("V.view(1, 3, 2, 3)", s.V.view({batch_size, seq_len, num_heads, head_dim}));

  w.step("Group by head: transpose(1, 2) gives (batch, heads, tokens, head_dim) = (1, 2, 3, 3).");
  w.show("Q", s.Q_heads);
  w.show("K", s.K_heads);
  w.show("V", s.V_heads);

  w.step("Transpose each head's keys, K_T = K.transpose(2, 3), ready for Q @ K_T.");
  w.show("K", s.K_heads);
  w.show("K_T", s.K_T);

  w.step("Attention scores Q @ K_T: one 3 x 3 table of query-key dot products per head.");
  w.show("attention_scores.shape", size_repr(s.scores));
  w.show("attention_scores", s.scores);

  w.step("Causal mask: True above the diagonal; those scores become -inf (no peeking ahead).");
  w.show("mask", s.mask);
  w.show("attention_scores", s.masked_scores);

  w.step("set_printoptions(precision=3, sci_mode=False); weights = softmax(scores / sqrt(3)).");
  set_printoptions(3, {}, {}, {}, std::optional<bool>(false));
  w.show("attention_weights.shape", size_repr(s.weights));
  w.show("attention_weights", s.weights);
  const std::vector<std::string> kid = {"the", "kid", "smiles"};
  w.plot("attention_weights", s.weights, kid, kid);

  w.step("Dropout(0.1): zero about 10% of the weights, scale the rest by 1 / 0.9.");
  w.show("attention_weights", s.dropped);
  w.plot("attention_weights_dropout", s.dropped, kid, kid);

  w.step("Context vectors: attention_weights @ V, per head (1, 2, 3, 3).");
  w.show("context_vectors.shape", size_repr(s.context));
  w.show("context_vectors", s.context);

  w.step("Back to tokens first: transpose(1, 2), then merge the heads into (1, 3, 6).");
  w.show("context_vectors.shape", size_repr(s.context_t));
  w.show("context_vectors", s.context_t);
  w.show("context_vectors.shape", size_repr(s.output));
  w.show("context_vectors", s.output);
}

// ---- seed 002: self-attention with trainable weights --------------------------------------------

const std::vector<std::string> kJourney = {"Your", "journey", "starts", "with", "one", "step"};

Tensor journey_inputs() {
  // "Your journey starts with one step", one 3-d embedding per word.
  return tensor({{0.43, 0.15, 0.89},
                 {0.55, 0.87, 0.66},
                 {0.57, 0.85, 0.64},
                 {0.22, 0.58, 0.33},
                 {0.77, 0.25, 0.10},
                 {0.05, 0.80, 0.55}});
}

void seed_002(Walk& w) {
  Tensor inputs = journey_inputs();

  w.step("Six 3-d inputs ('Your journey starts with one step'); x_2 ('journey') is the example.");
  Tensor x_2 = inputs[1];
  w.extra("x_2", x_2);

  w.step("Seed 1; W_q, W_k, W_v are 3 x 2 Parameters drawn from N(0, 1), not trained yet.");
  w.note("Created with requires_grad=False, so no result below records a grad_fn.");
  manual_seed(1);
  // torch.nn.Parameter(torch.randn(3, 2), requires_grad=False)
  Tensor W_q = randn({3, 2}).requires_grad_(false);
  Tensor W_k = randn({3, 2}).requires_grad_(false);
  Tensor W_v = randn({3, 2}).requires_grad_(false);
  w.show("W_q", param_repr(W_q));
  w.show("W_k", param_repr(W_k));
  w.show("W_v", param_repr(W_v));

  w.step("Query, key and value of x_2: x_2 times each matrix.");
  w.show("query_2", matmul(x_2, W_q));
  w.show("key_2", matmul(x_2, W_k));
  w.show("value_2", matmul(x_2, W_v));

  w.step("Keys, queries and values of all six inputs at once: one row per input.");
  Tensor keys = matmul(inputs, W_k);
  Tensor queries = matmul(inputs, W_q);
  Tensor values = matmul(inputs, W_v);
  w.show("keys", keys);
  w.show("queries", queries);
  w.show("values", values);

  w.step("Attention scores of x_2: its query against every key, queries[1] @ keys.T.");
  w.show("attention_scores_2", matmul(queries[1], keys.T()));

  w.step("All scores (omega) at once: queries @ keys.T, row i for input i.");
  Tensor attention_scores = matmul(queries, keys.T());
  w.show("attention_scores", attention_scores);

  w.step("Weights: softmax over each row of the scores divided by sqrt(d_k) = sqrt(2).");
  const int64_t dimension_keys = keys.size(-1);
  Tensor attention_weights = softmax(attention_scores / std::pow(double(dimension_keys), 0.5), -1);
  w.show("attention_weights", attention_weights);
  w.plot("attention_weights", attention_weights, kJourney, kJourney);

  w.step("Check: every row of weights sums to 1.");
  Tensor row_sums = attention_weights.sum({-1});
  w.show("attention_weights.sum(dim=-1)", row_sums);

  w.step("Context vectors: attention_weights @ values, one 2-d vector per input.");
  Tensor context_vectors = matmul(attention_weights, values);
  w.show("context_vectors", context_vectors);

  w.step("The same as a module: SelfAttentionV1(3, 2) with randn weights drawn after seed 1.");
  manual_seed(1);
  nn::SelfAttentionV1 sa(3, 2, nn::Init::Randn, /*requires_grad=*/false);
  w.note("Its weights are the W_q, W_k, W_v above, so forward() gives the context vectors above.");
  w.show("SelfAttentionV1(3, 2)(inputs)", sa(inputs));
}

// ---- seed 003: simplified, trainable and causal self-attention ----------------------------------

void seed_003(Walk& w) {
  Tensor inputs = journey_inputs();

  w.step("Simplified attention: scores are the inputs' pairwise dot products, inputs @ inputs.T.");
  Tensor attn_scores = matmul(inputs, inputs.T());
  w.show("attn_scores.shape", size_repr(attn_scores));

  w.step("Softmax over each row turns the 6 x 6 scores into weights.");
  Tensor attn_weights = softmax(attn_scores, -1);
  w.show("attn_weights.shape", size_repr(attn_weights));

  w.step(
      "Context vectors: the weights average the inputs themselves, so they keep the input shape.");
  Tensor all_context_vectors = matmul(attn_weights, inputs);
  w.show("all_context_vectors.shape", size_repr(all_context_vectors));
  w.extra("all_context_vectors", all_context_vectors);

  w.step("Trainable weights: queries, keys and values project the 6 x 3 inputs into d_out = 2.");
  w.show("inputs.shape", size_repr(inputs));

  w.step("SelfAttention_v1 with seed 123: W_query, W_key, W_value from U(0, 1), scaled softmax.");
  manual_seed(123);
  nn::SelfAttentionV1 sa_v1(inputs.size(1), 2);
  w.note("Its weights are Parameters that require grad, so results show their last op (grad_fn).");
  w.show("sa_v1(inputs)", sa_v1(inputs));

  w.step("Its attention weights, unmasked: every input attends to all six.");
  Tensor queries = matmul(inputs, sa_v1.W_query);
  Tensor keys = matmul(inputs, sa_v1.W_key);
  attn_scores = matmul(queries, keys.T());
  const double scale = std::pow(double(keys.size(-1)), 0.5);
  attn_weights = softmax(attn_scores / scale, -1);
  w.show("attn_weights", attn_weights);
  w.plot("attn_weights", attn_weights, kJourney, kJourney);

  const int64_t context_length = attn_scores.size(0);
  w.step("Causal mask, way 1: zero the weights above the diagonal (tril), then renormalise rows.");
  Tensor mask_simple = tril(ones({context_length, context_length}));
  Tensor masked_simple = attn_weights * mask_simple;
  Tensor masked_simple_norm = masked_simple / masked_simple.sum({-1}, /*keepdim=*/true);
  w.extra("masked_simple_norm", masked_simple_norm);
  w.plot("masked_simple_norm", masked_simple_norm, kJourney, kJourney);

  w.step("Causal mask, way 2: scores above the diagonal become -inf before the softmax.");
  Tensor mask = triu(ones({context_length, context_length}), 1);
  Tensor masked = attn_scores.masked_fill(mask.bool_(), -inf);
  Tensor causal_weights = softmax(masked / scale, 1);
  w.show("attn_weights", causal_weights);
  w.plot("causal_weights", causal_weights, kJourney, kJourney);
  w.extra("torch.allclose(masked_simple_norm, attn_weights)",
          py_bool(allclose(masked_simple_norm, causal_weights)));

  w.step("CausalAttention(3, 2, context_length=6, dropout=0.2), seed 123: mask buffer + dropout.");
  manual_seed(123);
  w.show("context_length", std::to_string(inputs.size(0)));
  nn::CausalAttention ca(inputs.size(1), 2, inputs.size(0), 0.2);
  Tensor context_vecs = ca(inputs);
  w.show("context_vecs.shape", size_repr(context_vecs));
  w.extra("context_vecs", context_vecs);
}

// ---- seed 004: the averaging trick, one head, encoder/decoder, cross-attention, peakiness -------

void seed_004(Walk& w) {
  w.step("Seed 42; a batch of 4 sequences of 8 tokens with 2 channels from N(0, 1).");
  w.note(
      "(The document also shows manual_seed's return value, a generator object at some address.)");
  manual_seed(42);
  int64_t B = 4, T = 8, C = 2;
  Tensor x = randn({B, T, C});
  w.show("x.shape", size_repr(x));

  w.step("Bag of words, way 1 (loop): token t becomes the mean of tokens 0..t of its sequence.");
  Tensor x_bow = zeros({B, T, C});
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      Tensor x_prev = x.index({b, Slice(None, t + 1)});
      x_bow.index_put_({b, t}, x_prev.mean({0}));
    }
  }
  w.show("x_bow[0]", x_bow[0]);

  w.step("Way 2 (matmul): start from a T x T matrix of ones ...");
  Tensor weights = ones({T, T});
  w.show("weights", weights);
  w.step("... keep its lower triangle, so token t only sees tokens 0..t ...");
  weights = tril(weights);
  w.show("weights", weights);
  w.step("... and divide each row by its sum: row t holds t + 1 equal weights.");
  weights = weights / weights.sum({1}, /*keepdim=*/true);
  w.show("weights", weights);
  std::vector<std::string> tokens;
  for (int64_t t = 0; t < T; ++t) tokens.push_back("t" + std::to_string(t));
  w.plot("averaging_weights", weights, tokens, tokens);
  w.step("One batched product (T, T) @ (B, T, C) does all the averaging of the loop.");
  Tensor x_bow2 = matmul(weights, x);
  w.show("x_bow2[0]", x_bow2[0]);
  w.show("torch.allclose(x_bow, x_bow2)", py_bool(allclose(x_bow, x_bow2)));

  w.step("Way 3 (softmax): the lower-triangular pattern ...");
  Tensor tril_ = tril(ones({T, T}));
  w.show("tril", tril_);
  w.step("... zeros where allowed, -inf where a token would see the future ...");
  weights = zeros({T, T}).masked_fill(tril_ == 0, -inf);
  w.show("weights", weights);
  w.step("... and a row softmax turns that into the same averaging weights.");
  weights = softmax(weights, -1);
  w.show("weights", weights);
  w.plot("softmax_weights", weights, tokens, tokens);
  w.step("Same averages again; with learned scores instead of zeros this is self-attention.");
  Tensor x_bow3 = matmul(weights, x);
  w.show("x_bow3[0]", x_bow3[0]);
  w.show("torch.allclose(x_bow, x_bow3)", py_bool(allclose(x_bow, x_bow3)));

  w.step("A single decoder head: 32 channels, head_size 16, scores q @ k^T scaled, causal, @ v.");
  w.note("x = randn(4, 8, 32) continues the seed-42 stream; key, query, value are Linear(32, 16).");
  C = 32;
  x = randn({B, T, C});
  const int64_t head_size = 16;
  const std::vector<uint8_t> before_layers = default_generator().get_state();
  nn::Linear key(C, head_size, /*bias=*/false);
  nn::Linear query(C, head_size, /*bias=*/false);
  nn::Linear value(C, head_size, /*bias=*/false);
  Tensor k = key(x);  // (B, T, head_size)
  Tensor q = query(x);
  weights = matmul(q, k.transpose(-2, -1));  // (B, T, T)
  weights *= std::pow(double(head_size), -0.5);
  Tensor tril_T = tril(ones({T, T}));
  weights = weights.masked_fill(tril_T == 0, -inf);
  weights = softmax(weights, -1);
  Tensor v = value(x);
  Tensor out = matmul(weights, v);
  w.show("out.shape", size_repr(out));

  w.step("The head's attention weights: each row mixes only the current and earlier tokens.");
  w.note("The document's In [68] came from unseen notebook state; these are the weights above.");
  w.differs("weights", weights);
  w.plot("head_weights", weights, tokens, tokens, "batch");

  w.step("The same head as a module: nn::Head(32, 16) built from the same generator state.");
  default_generator().set_state(before_layers);
  nn::Head head(C, head_size, /*causal=*/true);
  w.extra("torch.allclose(head(x), out)", py_bool(allclose(head(x), out, 1e-5, 1e-6)));

  w.step("Encoder vs decoder: without the tril mask every token also attends to later tokens.");
  default_generator().set_state(before_layers);
  nn::Head encoder(C, head_size, /*causal=*/false);
  w.note("Same weights as the decoder head: only the last row, which sees every token, agrees.");
  const Tensor encoder_weights = encoder.attention_weights(x)[0];
  w.extra("encoder.attention_weights(x)[0]", encoder_weights);
  w.plot("encoder_weights", encoder_weights, tokens, tokens);

  w.step(
      "Cross-attention: queries from x, keys and values from another source (5 tokens, 24 wide).");
  Tensor context = randn({B, 5, 24});
  nn::CrossAttention cross(C, 24, head_size);
  Tensor cross_out = cross.forward(x, context);
  Tensor cross_weights = cross.attention_weights(x, context);
  w.extra("cross_out.shape", size_repr(cross_out));
  w.extra("cross_weights.shape", size_repr(cross_weights));
  w.extra("cross_weights[0]", cross_weights[0]);
  w.plot("cross_weights", cross_weights[0], tokens, {"c0", "c1", "c2", "c3", "c4"});

  w.step("Why scale by head_size**-0.5: q . k of unit-variance vectors has variance head_size.");
  w.note("q_rand, k_rand: fresh (4, 8, 16) tensors from N(0, 1), continuing the stream.");
  Tensor k_rand = randn({B, T, head_size});
  Tensor q_rand = randn({B, T, head_size});
  Tensor raw = matmul(q_rand, k_rand.transpose(-2, -1));
  w.extra("(q_rand @ k_rand.transpose(-2, -1)).var()", raw.var());
  w.extra("(q_rand @ k_rand.transpose(-2, -1) * head_size**-0.5).var()",
          (raw * std::pow(double(head_size), -0.5)).var());

  w.step("Softmax peakiness: softmax of small scores stays spread out ...");
  Tensor t = tensor({0.1, -0.2, -0.3, 0.5});
  Tensor s1 = softmax(t, 0);
  w.show("s1", s1);
  w.show("s1.var()", s1.var());
  w.step("... but scores times 8 (temperature 1/8) push almost all weight onto the largest one.");
  Tensor s2 = softmax(t * 8, 0);
  w.show("s2", s2);
  w.show("s2.var()", s2.var());
}

// Restores the caller's print options however the walkthrough ends.
class PrintOptionsGuard {
 public:
  PrintOptionsGuard() : saved_(print_options()) {}
  ~PrintOptionsGuard() { print_options() = saved_; }
  PrintOptionsGuard(const PrintOptionsGuard&) = delete;
  PrintOptionsGuard& operator=(const PrintOptionsGuard&) = delete;

 private:
  PrintOptions saved_;
};

struct SeedEntry {
  const char* summary;
  void (*run)(Walk&);
};

const std::vector<SeedEntry>& seed_entries() {
  static const std::vector<SeedEntry> entries = {
      {"Vocabulary, random embeddings and the attention of one word, by hand.", seed_000},
      {"Multi-head causal attention on 3 tokens: projections, heads, mask, softmax, dropout.",
       seed_001},
      {"Scaled dot-product attention with trainable weights, then as a class.", seed_002},
      {"Simplified attention, SelfAttention_v1, causal masking and CausalAttention.", seed_003},
      {"Averaging the past three ways, one head, encoder/decoder, cross-attention, peakiness.",
       seed_004},
  };
  return entries;
}

}  // namespace

const std::vector<SeedInfo>& walkthrough_seeds() {
  static const std::vector<SeedInfo> seeds = {
      {"000", "000_a37b91e2cfdacae8.txt",
       "Understanding and Coding Self-Attention, Multi-Head Attention, Cross-Attention, and "
       "Causal-Attention in LLMs (Sebastian Raschka, 2024)"},
      {"001", "001_b6b9769fa5861ced.txt", "Multi-head attention in 13 steps"},
      {"002", "002_25da8ac5474e00cc.txt", "Self attention with trainable weights"},
      {"003", "003_0987cdae0714901b.txt", "Self-attention: simplified, trainable and causal"},
      {"004", "004_de6e81df231885c1.txt", "Mathematical Trick for Self-Attention"},
  };
  return seeds;
}

void run_walkthrough(const std::string& seed, std::ostream& os) { run_walkthrough(seed, os, ""); }

void run_walkthrough(const std::string& seed, std::ostream& os, const std::string& plots_dir) {
  const std::vector<SeedInfo>& seeds = walkthrough_seeds();
  std::vector<std::size_t> chosen;
  for (std::size_t i = 0; i < seeds.size(); ++i)
    if (seed.empty() || seeds[i].id == seed) chosen.push_back(i);
  if (chosen.empty()) {
    std::string known;
    for (const SeedInfo& s : seeds) known += " " + s.id;
    throw Error("[walkthrough] unknown seed '" + seed + "'; expected one of" + known);
  }
  if (!plots_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(plots_dir, ec);
    if (ec || !std::filesystem::is_directory(plots_dir))
      throw Error("[walkthrough] cannot create the plots directory '" + plots_dir +
                  "': " + (ec ? ec.message() : "not a directory"));
  }
  PrintOptionsGuard guard;
  Walk walk(os, plots_dir);
  for (std::size_t i : chosen) {
    print_options() = PrintOptions{};  // every document starts from PyTorch's defaults
    walk.seed(seeds[i], seed_entries()[i].summary);
    seed_entries()[i].run(walk);
  }
}

}  // namespace attn::tools
