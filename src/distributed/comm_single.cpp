// The world of one rank (a build without MPI, or a program started without mpirun): collectives
// are copies (or nothing), and a rank's messages to itself go through a mailbox.
#include <cstring>
#include <deque>
#include <map>
#include <vector>

#include "../common/error.h"
#include "backend.h"

namespace attn::distributed::detail {
namespace {

std::unique_ptr<Work::Impl> done_work() {
  auto w = std::make_unique<Work::Impl>();
  w->test = [] { return true; };
  return w;
}

class SingleBackend final : public CommBackend {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  std::string name() const override { return "single"; }

  std::unique_ptr<Work::Impl> all_reduce(void*, int64_t, Type, ReduceOp) override {
    return done_work();
  }
  std::unique_ptr<Work::Impl> all_gather(const void* in, void* out, int64_t bytes) override {
    if (in != out && bytes > 0) std::memmove(out, in, std::size_t(bytes));
    return done_work();
  }
  std::unique_ptr<Work::Impl> reduce_scatter(const void* in, void* out, int64_t count, Type type,
                                             ReduceOp) override {
    const std::size_t size = type == Type::F32 ? 4 : type == Type::I64 ? 8 : 1;
    if (in != out && count > 0) std::memmove(out, in, std::size_t(count) * size);
    return done_work();
  }
  std::unique_ptr<Work::Impl> broadcast(void*, int64_t, int) override { return done_work(); }
  std::unique_ptr<Work::Impl> send(const void* buf, int64_t bytes, int, int tag) override {
    const auto* p = static_cast<const char*>(buf);
    mailbox_[tag].emplace_back(p, p + bytes);
    return done_work();
  }
  std::unique_ptr<Work::Impl> recv(void* buf, int64_t bytes, int, int tag) override {
    auto w = std::make_unique<Work::Impl>();
    w->test = [this, buf, bytes, tag] {
      auto it = mailbox_.find(tag);
      if (it == mailbox_.end() || it->second.empty()) return false;
      std::vector<char> msg = std::move(it->second.front());
      it->second.pop_front();
      if (int64_t(msg.size()) != bytes)
        attn::detail::fail("recv", "rank 0 sent ", msg.size(), " bytes with tag ", tag,
                           " but the receiving tensor has ", bytes);
      std::memcpy(buf, msg.data(), msg.size());
      return true;
    };
    return w;
  }
  std::unique_ptr<Work::Impl> barrier() override { return done_work(); }

 private:
  std::map<int, std::deque<std::vector<char>>> mailbox_;
};

}  // namespace

std::shared_ptr<CommBackend> make_single_backend() { return std::make_shared<SingleBackend>(); }

}  // namespace attn::distributed::detail
