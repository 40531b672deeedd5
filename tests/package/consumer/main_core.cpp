// A program that needs tensors and attention only: it links attn::core, the lowest layer (no
// cairo, PCRE2 or MPI on its link line; run_consumer.cmake checks that), and includes only that
// layer's headers.
#include <cstdio>

#include "core_check.h"

int main() {
  const CoreCheck c = core_check();
  std::printf("attn core consumer sdpa=%.6f expected=%.6f matmul=%g %s\n", c.got, c.expected,
              c.matmul, c.ok() ? "OK" : "FAIL");
  return c.ok() ? 0 : 1;
}
