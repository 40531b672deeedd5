// A build without MPI: every process is a world of one rank.
#include <cstdlib>

#include "backend.h"

namespace attn::distributed::detail {

bool backend_has_mpi() { return false; }
std::shared_ptr<CommBackend> make_world_backend() { return make_single_backend(); }
void backend_abort(int code) { std::_Exit(code); }
void backend_finalize() {}

}  // namespace attn::distributed::detail
