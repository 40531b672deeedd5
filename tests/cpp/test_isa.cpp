// The instruction-set layer (src/backend/cpu/isa.h): the element loops built per instruction set
// with ATTN_ISA_VARIANTS follow active_isa(), as the fused attention kernels do, and their builds
// agree to a float rounding (the baseline build has no FMA, so a * b + c rounds twice there);
// LayerNorm's AVX2 and AVX-512 builds agree bit for bit (its sums' order depends on the row
// length only, never on the vector width).
#include <attn/attn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "../../src/backend/cpu/isa.h"
#include "../../src/backend/cpu/optim.h"
#include "isa_scope.h"

namespace {

namespace K = attn::kernels;
namespace F = attn::nn::functional;
using attn::Tensor;
using attn::testing::IsaScope;
using K::Isa;

std::vector<float> values(const Tensor& t) {
  const Tensor c = t.contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

struct Results {
  std::vector<float> ln, ln_dx, ln_dw, gelu, gelu_dx, gelu_tanh, adamw;
};

Results run_all() {
  Results r;
  attn::manual_seed(7);
  // 37 columns: full lanes of 16 and a tail; 300 rows: above the parallel threshold.
  Tensor x = attn::randn({300, 37}).requires_grad_();
  Tensor w = (attn::randn({37}) * 0.5 + 1.0).requires_grad_();
  Tensor b = attn::randn({37}).requires_grad_();
  Tensor y = F::layer_norm(x, 37, w, b, 1e-5);
  (y * attn::randn({300, 37})).sum().backward();
  r.ln = values(y);
  r.ln_dx = values(x.grad());
  r.ln_dw = values(w.grad());
  Tensor g = (attn::randn({70000}) * 3.0).requires_grad_();
  Tensor gy = F::gelu(g);
  gy.sum().backward();
  r.gelu = values(gy);
  r.gelu_dx = values(g.grad());
  r.gelu_tanh = values(F::gelu(g.detach(), "tanh"));
  std::vector<float> p(1000), gr(1000), m(1000, 0.f), v(1000, 0.f);
  for (int i = 0; i < 1000; ++i) p[i] = std::sin(0.1f * i), gr[i] = std::cos(0.37f * i);
  K::adamw_update(p.data(), gr.data(), m.data(), v.data(), 1000, 0.999f, 0.9f, 0.1f, 0.999f, 0.001f,
                  0.0316f, 1e-8f, -0.001f, 1.0f);
  r.adamw = p;
  return r;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float rtol,
                  const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(std::fabs(a[i] - b[i]) <= rtol * std::fabs(b[i]) + 1e-6f) && bad++ < 3)
      ADD_FAILURE() << what << "[" << i << "]: " << a[i] << " vs " << b[i];
}

TEST(Isa, OverrideIsTheActiveChoiceAndIsRefusedWhereUnsupported) {
  const Isa before = K::active_isa();
  EXPECT_TRUE(K::isa_supported(before));
  {
    IsaScope scalar(Isa::Scalar);
    ASSERT_TRUE(scalar.ok());
    EXPECT_EQ(K::active_isa(), Isa::Scalar);
  }
  EXPECT_EQ(K::active_isa(), before);
  for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::Sve})
    if (!K::isa_supported(isa)) EXPECT_FALSE(K::set_isa(isa)) << K::isa_name(isa);
  EXPECT_EQ(K::active_isa(), before);
}

TEST(Isa, ElementLoopsAgreeOnEveryInstructionSet) {
  Results base;
  {
    IsaScope scalar(Isa::Scalar);
    base = run_all();
  }
  int tried = 0;
  std::vector<Results> fma;  // AVX2 and AVX-512
  for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::Sve}) {
    IsaScope scope(isa);
    if (!scope.ok()) continue;
    ++tried;
    SCOPED_TRACE(K::isa_name(isa));
    const Results r = run_all();
    if (isa == Isa::Avx2 || isa == Isa::Avx512) fma.push_back(r);
    expect_close(r.ln, base.ln, 2e-6f, "layer_norm");
    expect_close(r.ln_dx, base.ln_dx, 2e-5f, "layer_norm dx");
    expect_close(r.ln_dw, base.ln_dw, 2e-5f, "layer_norm dw");
    expect_close(r.gelu, base.gelu, 2e-6f, "gelu");
    expect_close(r.gelu_dx, base.gelu_dx, 2e-6f, "gelu dx");
    expect_close(r.gelu_tanh, base.gelu_tanh, 2e-6f, "gelu tanh");
    expect_close(r.adamw, base.adamw, 1e-6f, "adamw");
  }
  if (fma.size() == 2) {
    EXPECT_EQ(fma[0].ln, fma[1].ln);
    EXPECT_EQ(fma[0].ln_dx, fma[1].ln_dx);
    EXPECT_EQ(fma[0].ln_dw, fma[1].ln_dw);
  }
  if (tried == 0) GTEST_SKIP() << "this CPU has no vector instruction set beyond the baseline";
}

}  // namespace
