// Seed 004 in C++: the "mathematical trick" behind self-attention.
//
// Averaging every token with the tokens before it (a "bag of words" over the past) can be written
// as a loop, as one matrix product with a normalised lower-triangular matrix, or as a softmax over
// a masked score matrix. The last form is exactly attention once the scores are learned: a head
// computes them as query-key dot products. Then: encoder vs decoder heads, cross-attention, and why
// the scores are scaled before the softmax.
//
// Build and run:  ./build/examples/seed_004_bag_of_words
#include <attn/attn.h>

#include <cmath>
#include <iostream>

using attn::indexing::None;
using attn::indexing::Slice;

int main() {
  try {
    attn::manual_seed(42);
    const int64_t B = 4, T = 8;  // batch, time (tokens)
    attn::Tensor x = attn::randn({B, T, 2});
    std::cout << std::boolalpha;

    // 1. The loop: x_bow[b, t] = mean of x[b, 0..t].
    attn::Tensor x_bow = attn::zeros({B, T, 2});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        x_bow.index_put_({b, t}, x.index({b, Slice(None, t + 1)}).mean({0}));
    std::cout << "x_bow[0] =\n" << x_bow[0] << "\n";

    // 2. The same averages as one product: row t of `avg` holds 1/(t+1) in its first t+1 columns.
    attn::Tensor avg = attn::tril(attn::ones({T, T}));
    avg = avg / avg.sum({1}, /*keepdim=*/true);
    std::cout << "matmul  == loop: " << attn::allclose(attn::matmul(avg, x), x_bow) << "\n";

    // 3. And as a softmax: zeros where a token may look, -inf where it would see the future.
    //    Replace the zeros by data-dependent scores and this is self-attention.
    attn::Tensor tril = attn::tril(attn::ones({T, T}));
    attn::Tensor w = attn::zeros({T, T}).masked_fill(tril == 0, -attn::inf);
    w = attn::softmax(w, -1);
    std::cout << "softmax == loop: " << attn::allclose(attn::matmul(w, x), x_bow) << "\n\n";

    // 4. One head of self-attention on 32 channels. Each token emits a query ("what am I looking
    //    for"), a key ("what do I contain") and a value ("what I will tell you"). nn::Head builds
    //    the three bias-free Linear layers and applies the causal mask (a decoder head).
    const int64_t C = 32, head_size = 16;
    x = attn::randn({B, T, C});
    attn::nn::Head decoder(C, head_size, /*causal=*/true);
    attn::Tensor out = decoder(x);
    std::cout << "head output " << attn::shape_str(out.shape()) << "\n";
    std::cout << "decoder weights, sequence 0 (no token sees the future):\n"
              << decoder.attention_weights(x)[0] << "\n";

    // 5. An encoder head drops the mask: every token talks to every other token.
    attn::nn::Head encoder(C, head_size, /*causal=*/false);
    std::cout << "encoder weights, sequence 0, first row: " << encoder.attention_weights(x)[0][0]
              << "\n\n";

    // 6. Cross-attention: queries come from x, keys and values from another source, here 5 tokens
    //    of width 24 (say, an encoder's output). The weights are (B, T, 5).
    attn::Tensor source = attn::randn({B, 5, 24});
    attn::nn::CrossAttention cross(C, 24, head_size);
    std::cout << "cross-attention output " << attn::shape_str(cross.forward(x, source).shape())
              << ", weights " << attn::shape_str(cross.attention_weights(x, source).shape())
              << "\n\n";

    // 7. Why heads multiply the scores by head_size**-0.5: softmax sharpens large inputs. Scores
    //    eight times larger (temperature 1/8) put nearly all weight on the largest entry.
    attn::Tensor t = attn::tensor({0.1, -0.2, -0.3, 0.5});
    attn::Tensor s1 = attn::softmax(t, 0), s2 = attn::softmax(t * 8, 0);
    std::cout << "softmax(t)     = " << s1 << "  var " << s1.var() << "\n";
    std::cout << "softmax(t * 8) = " << s2 << "  var " << s2.var() << "\n";
    return 0;
  } catch (const attn::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
