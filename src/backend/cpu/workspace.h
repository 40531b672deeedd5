// Scratch memory of the attention kernels that cannot be had, reported without leaving a parallel
// region by an exception (which would end the process: std::terminate).
#pragma once

#include <atomic>
#include <new>

namespace attn::kernels {

// Thrown after the parallel region by a kernel whose per-thread scratch could not be allocated.
// `bytes` is what one thread asked for; `purpose` names the buffer ("the fused forward's
// per-thread workspace"). ops/attention.cpp turns it into attn::AllocationError.
class WorkspaceError : public std::bad_alloc {
 public:
  WorkspaceError(double bytes_, const char* purpose_) : bytes(bytes_), purpose(purpose_) {}
  const char* what() const noexcept override { return "attention kernel workspace"; }
  double bytes;
  const char* purpose;
};

// The allocation failures of the threads of one parallel region. Each thread allocates through
// allocate(); one whose allocation failed (and, once any has, every thread) skips its work;
// after the region, check() throws WorkspaceError if any thread failed.
class ThreadScratch {
 public:
  ThreadScratch(double bytes_per_thread, const char* purpose)
      : bytes_(bytes_per_thread), purpose_(purpose) {}
  // Runs `alloc` (which allocates this thread's scratch); false if it threw (std::bad_alloc, or
  // std::length_error for a size beyond what a vector can hold).
  template <typename F>
  bool allocate(F&& alloc) noexcept {
    try {
      alloc();
      return true;
    } catch (...) {
      failed_.store(true, std::memory_order_relaxed);
      return false;
    }
  }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  void check() const {
    if (failed()) throw WorkspaceError(bytes_, purpose_);
  }

 private:
  double bytes_;
  const char* purpose_;
  std::atomic<bool> failed_{false};
};

}  // namespace attn::kernels
