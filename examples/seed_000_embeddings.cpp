// Seed 000 in C++: from a sentence to the attention-weighted context vector of one word.
//
// Sebastian Raschka's article "Understanding and Coding Self-Attention, Multi-Head Attention,
// Cross-Attention, and Causal-Attention in LLMs" starts with a toy sentence, gives every word an id
// and a random 3-d embedding, and then computes, by hand, the attention of the second word over the
// whole sentence. This program does the same with attn; with the same seeds it prints the same
// numbers as PyTorch.
//
// Build and run:  cmake --build build --target example_seed_000_embeddings
//                 ./build/examples/seed_000_embeddings
#include <attn/attn.h>

#include <cmath>
#include <iostream>

int main() {
  try {
    // 1. A vocabulary restricted to the sentence itself: the distinct words (the comma removed),
    //    sorted, each numbered by its position. Real vocabularies hold 30k-50k entries.
    const std::string sentence = "Life is short, eat dessert first";
    attn::nn::Vocabulary vocab(sentence);
    std::cout << vocab.repr() << "\n";

    // 2. The sentence as a tensor of word ids (int64), in sentence order.
    attn::Tensor ids = vocab.encode(sentence);
    std::cout << ids << "\n";

    // 3. An embedding table maps each id to a vector. torch.nn.Embedding(50000, 3) draws its
    //    50000 x 3 table from N(0, 1); with seed 123 the rows we look up are PyTorch's rows.
    attn::manual_seed(123);
    attn::nn::Embedding embed(50'000, 3);
    attn::Tensor x = embed(ids).detach();  // (6, 3): one row per word
    std::cout << x << "\n";

    // 4. Three trainable projections. Queries and keys must share a size (here 2) because we take
    //    their dot products; values may have another size (here 4). They require grad, so every
    //    result computed from them records the op that made it and prints it, as PyTorch does:
    //    tensor(1.2903, grad_fn=<DotBackward0>).
    attn::manual_seed(123);
    const int64_t d = x.size(1), d_q = 2, d_k = 2, d_v = 4;
    attn::Tensor W_query = attn::rand({d, d_q}).requires_grad_();
    attn::Tensor W_key = attn::rand({d, d_k}).requires_grad_();
    attn::Tensor W_value = attn::rand({d, d_v}).requires_grad_();

    // 5. Attention for the second word, "is": its query is compared with every word's key.
    attn::Tensor query_2 = attn::matmul(x[1], W_query);  // (2)
    attn::Tensor keys = attn::matmul(x, W_key);          // (6, 2)
    attn::Tensor values = attn::matmul(x, W_value);      // (6, 4)

    // One unnormalised weight is one dot product: "is" against "dessert" (the fifth word) ...
    std::cout << "omega_24 = " << query_2.dot(keys[4]) << "\n";
    // ... and all six at once are a vector-matrix product.
    attn::Tensor omega_2 = attn::matmul(query_2, keys.T());

    // 6. Softmax turns the scores into weights that are positive and sum to 1. Dividing by
    //    sqrt(d_k) keeps the scores' scale independent of the key size.
    attn::Tensor weights_2 = attn::softmax(omega_2 / std::sqrt(double(d_k)), 0);
    std::cout << "attention weights of 'is': " << weights_2 << "\n";

    // 7. The context vector of "is" is the weighted average of all values: a 4-d vector that
    //    mixes in what the sentence says around the word.
    attn::Tensor context_2 = attn::matmul(weights_2, values);
    std::cout << "context vector of 'is':    " << context_2 << "\n";
    return 0;
  } catch (const attn::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
