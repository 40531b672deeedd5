// Seed 001 in C++: multi-head causal self-attention, one tensor operation at a time.
//
// Three tokens ("the kid smiles") of 6 features go through 2 heads of size 3. The shapes are the
// point of the exercise, so each step prints its result's shape next to the tensor:
//   x (1, 3, 6) -> Q, K, V (1, 3, 6) -> (1, 3, 2, 3) -> heads (1, 2, 3, 3)
//   -> scores (1, 2, 3, 3) -> masked, softmax, dropout -> context (1, 2, 3, 3) -> (1, 3, 6)
//
// Build and run:  ./build/examples/seed_001_multihead_steps
#include <attn/attn.h>

#include <cmath>
#include <iostream>
#include <string>

namespace {

void show(const std::string& name, const attn::Tensor& t) {
  std::cout << name << "  " << attn::shape_str(t.shape()) << "\n" << t << "\n\n";
}

}  // namespace

int main() {
  try {
    // Step 1: the input, a batch of one sequence of three tokens.
    attn::Tensor x = attn::tensor({{{1.0, 2.0, 3.0, 4.0, 5.0, 6.0},     // the
                                    {6.0, 5.0, 4.0, 3.0, 2.0, 1.0},     // kid
                                    {1.0, 1.0, 1.0, 1.0, 1.0, 1.0}}});  // smiles
    const int64_t batch = x.size(0), seq_len = x.size(1), d_model = x.size(2);

    // Step 2: the output width and the number of heads; each head sees d_out / num_heads features.
    const int64_t d_out = 6, num_heads = 2, head_dim = d_out / num_heads;

    // Step 3: projection matrices from N(0, 1), seed 0 (torch.randn draws the same numbers).
    attn::manual_seed(0);
    attn::Tensor Wq = attn::randn({d_model, d_out});
    attn::Tensor Wk = attn::randn({d_model, d_out});
    attn::Tensor Wv = attn::randn({d_model, d_out});

    // Step 4: queries, keys and values for every token: (1, 3, 6) @ (6, 6) -> (1, 3, 6).
    attn::Tensor Q = attn::matmul(x, Wq), K = attn::matmul(x, Wk), V = attn::matmul(x, Wv);
    show("Q", Q);

    // Step 5: split the last dim into (heads, head_dim). A view: no data moves.
    Q = Q.view({batch, seq_len, num_heads, head_dim});
    K = K.view({batch, seq_len, num_heads, head_dim});
    V = V.view({batch, seq_len, num_heads, head_dim});

    // Step 6: put heads before tokens, (1, 3, 2, 3) -> (1, 2, 3, 3), so that each head becomes an
    // independent batch of 3 x 3 matrices for the products below.
    Q = Q.transpose(1, 2);
    K = K.transpose(1, 2);
    V = V.transpose(1, 2);
    show("Q grouped by heads", Q);

    // Steps 7-8: scores = Q @ K^T per head; entry (i, j) says how much token i looks at token j.
    attn::Tensor scores = attn::matmul(Q, K.transpose(2, 3));
    show("attention scores", scores);

    // Step 9: causal mask. True above the diagonal = "in the future"; those scores become -inf,
    // so the softmax gives them weight exactly 0.
    attn::Tensor mask = attn::triu(attn::ones({seq_len, seq_len}), 1).bool_();
    scores.masked_fill_(mask, -attn::inf);
    show("masked scores", scores);

    // Step 10: softmax over the keys of the scaled scores. The scores here are in the hundreds, so
    // the weights are nearly one-hot. Three decimals, fixed notation, as in the document.
    attn::set_printoptions(3, {}, {}, {}, std::optional<bool>(false));
    attn::Tensor weights = attn::softmax(scores / std::sqrt(double(head_dim)), -1);
    show("attention weights", weights);

    // Step 11: dropout(0.1) zeroes each weight with probability 0.1 and scales the survivors by
    // 1 / 0.9 (with seed 0 no visible weight is dropped; the scaling shows as 1.111).
    attn::nn::Dropout dropout(0.1);
    attn::Tensor dropped = dropout(weights);
    show("after dropout", dropped);

    // Step 12: each token's context vector is its weighted mix of the values, per head.
    attn::Tensor context = attn::matmul(dropped, V);  // (1, 2, 3, 3)
    show("context vectors", context);

    // Step 13: tokens first again, then concatenate the heads: (1, 2, 3, 3) -> (1, 3, 2, 3)
    // -> (1, 3, 6). reshape copies here, because the transposed tensor is not contiguous.
    context = context.transpose(1, 2).reshape({batch, seq_len, num_heads * head_dim});
    show("concatenated heads", context);

    // Steps 8-12 are one call of the attention kernel. Without dropout it matches the
    // hand-computed weights @ V.
    attn::SdpaOptions opts;
    opts.is_causal = true;
    attn::Tensor fused = attn::scaled_dot_product_attention(Q, K, V, opts);
    std::cout << "scaled_dot_product_attention == weights @ V: " << std::boolalpha
              << attn::allclose(fused, attn::matmul(weights, V), 1e-4, 1e-4) << "\n";
    return 0;
  } catch (const attn::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
