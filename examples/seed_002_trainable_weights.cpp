// Seed 002 in C++: scaled dot-product self-attention with trainable weight matrices.
//
// Six 3-d input vectors ("Your journey starts with one step") are projected into queries, keys and
// values by three 3 x 2 matrices W_q, W_k, W_v; the attention weights compare queries with keys,
// and each output (context vector) is a weighted average of the values. First for one input, then
// for all six with matrix products, and finally with the SelfAttentionV1 module.
//
// Build and run:  ./build/examples/seed_002_trainable_weights
#include <attn/attn.h>

#include <cmath>
#include <iostream>

int main() {
  try {
    attn::Tensor inputs = attn::tensor({{0.43, 0.15, 0.89},    // Your
                                        {0.55, 0.87, 0.66},    // journey
                                        {0.57, 0.85, 0.64},    // starts
                                        {0.22, 0.58, 0.33},    // with
                                        {0.77, 0.25, 0.10},    // one
                                        {0.05, 0.80, 0.55}});  // step
    const int64_t d_in = inputs.size(1), d_out = 2;

    // The weights are Parameters: random now (N(0, 1), seed 1), learned in training later. The
    // seed creates them with requires_grad=False (not trained yet), so no result records a grad_fn.
    attn::manual_seed(1);
    attn::Tensor W_q = attn::randn({d_in, d_out});
    attn::Tensor W_k = attn::randn({d_in, d_out});
    attn::Tensor W_v = attn::randn({d_in, d_out});
    std::cout << "W_q =\n" << W_q << "\n";

    // One input: "journey" gets its own query, key and value, each 2-d.
    attn::Tensor x_2 = inputs[1];
    std::cout << "query_2 = " << attn::matmul(x_2, W_q) << "\n";

    // All inputs at once: row i of each product belongs to input i.
    attn::Tensor queries = attn::matmul(inputs, W_q);  // (6, 2)
    attn::Tensor keys = attn::matmul(inputs, W_k);     // (6, 2)
    attn::Tensor values = attn::matmul(inputs, W_v);   // (6, 2)

    // Attention scores (omega): every query against every key. Row 1 is "journey"'s.
    attn::Tensor scores = attn::matmul(queries, keys.T());  // (6, 6)
    std::cout << "scores of journey = " << scores[1] << "\n";

    // Weights: softmax of each row, after dividing by sqrt(d_k). Dot products of d_k-dimensional
    // vectors grow with d_k; the division keeps the softmax from becoming too peaked.
    const double d_k = double(keys.size(-1));
    attn::Tensor weights = attn::softmax(scores / std::sqrt(d_k), -1);
    std::cout << "weights =\n" << weights << "\n";
    std::cout << "row sums = " << weights.sum({-1}) << "\n";

    // Context vectors: the weighted average of the values, one row per input.
    attn::Tensor context = attn::matmul(weights, values);
    std::cout << "context vectors =\n" << context << "\n";

    // The same computation packaged as a module. Seeding with 1 again makes it draw the same three
    // matrices, so its output equals `context`.
    attn::manual_seed(1);
    attn::nn::SelfAttentionV1 sa(d_in, d_out, attn::nn::Init::Randn, /*requires_grad=*/false);
    std::cout << "SelfAttentionV1 agrees: " << std::boolalpha << attn::allclose(sa(inputs), context)
              << "\n";
    return 0;
  } catch (const attn::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
