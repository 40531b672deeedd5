// Seed 003 in C++: from the simplest self-attention to causal attention with dropout.
//
//   1. simplified attention: scores are the inputs' own dot products, no weights to learn;
//   2. SelfAttention_v1: trainable W_query, W_key, W_value (uniform random, seed 123);
//   3. causal masking: a token may not attend to the tokens after it;
//   4. CausalAttention: the mask as a buffer plus dropout on the attention weights.
//
// Build and run:  ./build/examples/seed_003_causal_attention
#include <attn/attn.h>

#include <cmath>
#include <iostream>

int main() {
  try {
    attn::Tensor inputs = attn::tensor({{0.43, 0.15, 0.89},
                                        {0.55, 0.87, 0.66},
                                        {0.57, 0.85, 0.64},
                                        {0.22, 0.58, 0.33},
                                        {0.77, 0.25, 0.10},
                                        {0.05, 0.80, 0.55}});
    const int64_t n = inputs.size(0);

    // 1. Simplified attention. inputs @ inputs.T holds every pairwise dot product (6 x 6); softmax
    //    makes each row a set of weights; the weights average the inputs, so the context vectors
    //    have the inputs' shape (6 x 3).
    attn::Tensor simple = attn::matmul(attn::softmax(attn::matmul(inputs, inputs.T()), -1), inputs);
    std::cout << "simplified context vectors " << attn::shape_str(simple.shape()) << "\n"
              << simple << "\n\n";

    // 2. Trainable weights. The module draws W_query, W_key, W_value from U(0, 1) in that order.
    attn::manual_seed(123);
    attn::nn::SelfAttentionV1 sa_v1(inputs.size(1), 2);
    std::cout << "SelfAttention_v1(inputs) =\n" << sa_v1(inputs) << "\n\n";

    // 3. Causal masking. Recompute the scores from the module's own matrices ...
    attn::Tensor queries = attn::matmul(inputs, sa_v1.W_query);
    attn::Tensor keys = attn::matmul(inputs, sa_v1.W_key);
    attn::Tensor scores = attn::matmul(queries, keys.T());
    const double scale = std::sqrt(double(keys.size(-1)));

    //    ... way 1: softmax first, then zero the future (tril keeps the past) and renormalise each
    //    row so that it sums to 1 again;
    attn::Tensor weights = attn::softmax(scores / scale, -1);
    attn::Tensor past = attn::tril(attn::ones({n, n}));
    attn::Tensor way1 = weights * past;
    way1 = way1 / way1.sum({-1}, /*keepdim=*/true);

    //    ... way 2: set the future scores to -inf before the softmax (exp(-inf) = 0). One pass,
    //    and the way attention kernels do it.
    attn::Tensor future = attn::triu(attn::ones({n, n}), 1).bool_();
    attn::Tensor way2 = attn::softmax(scores.masked_fill(future, -attn::inf) / scale, -1);
    std::cout << "causal attention weights =\n" << way2 << "\n";
    std::cout << "both ways agree: " << std::boolalpha << attn::allclose(way1, way2) << "\n\n";

    // 4. CausalAttention keeps the mask as a (context_length x context_length) buffer, so inputs of
    //    any length up to context_length work, and applies dropout(0.2) to the weights while
    //    training: each weight is zeroed with probability 0.2, survivors are scaled by 1 / 0.8.
    attn::manual_seed(123);
    attn::nn::CausalAttention ca(inputs.size(1), 2, /*context_length=*/n, /*dropout=*/0.2);
    attn::Tensor context_vecs = ca(inputs);
    std::cout << "context_vecs.shape: " << attn::shape_str(context_vecs.shape()) << "\n";
    // Every training-mode pass draws a fresh dropout mask; a whole row may even be dropped.
    std::cout << "weights of another training pass =\n" << ca.attention_weights(inputs) << "\n";
    // In evaluation mode dropout is the identity and the weights are the causal weights above.
    ca.eval();
    std::cout << "eval weights == causal weights: "
              << attn::allclose(ca.attention_weights(inputs), way2) << "\n";
    return 0;
  } catch (const attn::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
