// For the tests of CPU kernels on every instruction set: IsaScope forces one (kernels::set_isa)
// for its lifetime and restores the previous choice after.
#pragma once

#include "../../src/backend/cpu/isa.h"

namespace attn::testing {

class IsaScope {
 public:
  explicit IsaScope(kernels::Isa isa)
      : before_(kernels::active_isa()), ok_(kernels::set_isa(isa)) {}
  ~IsaScope() { kernels::set_isa(before_); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;
  // Whether the CPU runs the instruction set (false: nothing was changed).
  bool ok() const { return ok_; }

 private:
  kernels::Isa before_;
  bool ok_;
};

}  // namespace attn::testing
