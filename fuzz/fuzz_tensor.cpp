// attn::tensor(const NestedList&, optional dtype) on trees decoded from the input, checked against
// an independent reading of the same tree: the call succeeds exactly when the tree is rectangular
// (every list at one depth has the same length, every leaf at the same depth, below the last list)
// and, for int64, every float leaf fits; the result has the shape, dtype and values in row-major
// order that the tree gives.
//
// Input grammar: byte 0 chooses the dtype (bits 0-1: inferred, float32, int64, bool; with bit 3
// set, float32 becomes bfloat16 and with bit 4 float16) and whether the root is a single number
// (bit 2). Each following byte is one token (its low 3 bits):
//   0, 1  open a list          2  close the innermost list
//   3     small int (next byte, signed)     4  int64 (next 8 bytes)
//   5     double (next 8 bytes: any bits, NaN and inf included)
//   6     small float (next byte / 4 - 32)  7  bool (next byte & 1)
// Lists still open at the end are closed. At most kMaxDepth levels and kMaxNodes nodes.
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "fuzz_util.h"

namespace {

constexpr int kMaxDepth = 40;
constexpr int kMaxNodes = 4096;

enum class Kind { List, Int, Float, Bool };

struct Node {
  Kind kind = Kind::List;
  int64_t i = 0;
  double d = 0;
  bool b = false;
  std::vector<Node> items;
};

// Reads one leaf of token `op` (3..7) into `n`.
void read_leaf(int op, attn_fuzz::ByteReader& in, Node& n) {
  switch (op) {
    case 3: n.kind = Kind::Int, n.i = int8_t(in.byte()); break;
    case 4: n.kind = Kind::Int, n.i = in.value<int64_t>(); break;
    case 5: n.kind = Kind::Float, n.d = in.value<double>(); break;
    case 6: n.kind = Kind::Float, n.d = double(in.byte()) / 4.0 - 32.0; break;
    default: n.kind = Kind::Bool, n.b = (in.byte() & 1) != 0; break;
  }
}

Node decode(attn_fuzz::ByteReader& in, bool scalar_root) {
  Node root;
  if (scalar_root) {
    int op = 3 + in.byte() % 5;
    read_leaf(op, in, root);
    return root;
  }
  std::vector<Node*> stack = {&root};
  int nodes = 1;
  while (!in.empty() && nodes < kMaxNodes) {
    const int op = in.byte() & 7;
    if (op == 2) {
      if (stack.size() > 1) stack.pop_back();
      continue;
    }
    Node n;
    if (op <= 1) {
      if (int(stack.size()) >= kMaxDepth) continue;
    } else {
      read_leaf(op, in, n);
    }
    stack.back()->items.push_back(std::move(n));
    ++nodes;
    // Pointers into `items` stay valid: a list only grows while it is the innermost one.
    if (op <= 1) stack.push_back(&stack.back()->items.back());
  }
  return root;
}

attn::NestedList to_nested(const Node& n) {
  switch (n.kind) {
    case Kind::Int: return attn::NestedList(static_cast<long long>(n.i));
    case Kind::Float: return attn::NestedList(n.d);
    case Kind::Bool: return attn::NestedList(n.b);
    case Kind::List: break;
  }
  std::vector<attn::NestedList> items;
  items.reserve(n.items.size());
  for (const Node& c : n.items) items.push_back(to_nested(c));
  return attn::NestedList(std::move(items));
}

// The independent reading: per-depth list lengths and leaf depths, then the leaves in order.
struct Reading {
  std::vector<std::optional<int64_t>> lengths;  // per depth: the common list length (if any list)
  bool rectangular = true;
  int leaf_depth = -1;
  std::vector<const Node*> leaves;  // depth-first, left to right
  bool any_float = false, all_bool = true;
};

void walk(const Node& n, int depth, Reading& r) {
  if (n.kind != Kind::List) {
    if (r.leaf_depth < 0) r.leaf_depth = depth;
    if (r.leaf_depth != depth) r.rectangular = false;
    r.leaves.push_back(&n);
    r.any_float |= n.kind == Kind::Float;
    r.all_bool &= n.kind == Kind::Bool;
    return;
  }
  if (int(r.lengths.size()) <= depth) r.lengths.resize(std::size_t(depth) + 1);
  auto& len = r.lengths[std::size_t(depth)];
  if (len && *len != int64_t(n.items.size())) r.rectangular = false;
  len = int64_t(n.items.size());
  for (const Node& c : n.items) walk(c, depth + 1, r);
}

bool fits_int64(double v) { return v >= -9223372036854775808.0 && v < 9223372036854775808.0; }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  attn_fuzz::init_single_thread();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  attn_fuzz::ByteReader in(data, size);
  const uint8_t head = in.byte();
  std::optional<attn::Dtype> dtype;
  switch (head & 3) {
    case 1:
      dtype = (head & 8)    ? attn::Dtype::BFloat16
              : (head & 16) ? attn::Dtype::Float16
                            : attn::Dtype::Float32;
      break;
    case 2: dtype = attn::Dtype::Int64; break;
    case 3: dtype = attn::Dtype::Bool; break;
    default: break;
  }
  const Node root = decode(in, (head & 4) != 0);

  Reading r;
  walk(root, 0, r);
  // Leaves must lie below the last level of lists.
  if (r.leaf_depth >= 0 && int(r.lengths.size()) != r.leaf_depth) r.rectangular = false;
  attn::Shape shape;
  for (const auto& len : r.lengths) shape.push_back(len.value_or(0));
  const bool empty = r.leaves.empty() && (root.kind == Kind::List);
  const attn::Dtype want_dtype = dtype.value_or(empty || r.any_float ? attn::Dtype::Float32
                                                : r.all_bool         ? attn::Dtype::Bool
                                                                     : attn::Dtype::Int64);
  bool convertible = true;
  if (want_dtype == attn::Dtype::Int64)
    for (const Node* l : r.leaves)
      if (l->kind == Kind::Float && !fits_int64(l->d)) convertible = false;

  attn::Tensor t;
  try {
    t = attn::tensor(to_nested(root), dtype);
  } catch (const attn::Error&) {
    FUZZ_CHECK(!r.rectangular || !convertible);
    return 0;
  }
  FUZZ_CHECK(r.rectangular && convertible);
  FUZZ_CHECK(t.shape() == shape);
  FUZZ_CHECK(t.dtype() == want_dtype);
  FUZZ_CHECK(t.is_contiguous());
  FUZZ_CHECK(t.numel() == int64_t(r.leaves.size()) || (r.leaves.empty() && t.numel() == 0));
  for (std::size_t k = 0; k < r.leaves.size(); ++k) {
    const Node& l = *r.leaves[k];
    const double d = l.kind == Kind::Float ? l.d
                     : l.kind == Kind::Int ? double(l.i)
                                           : (l.b ? 1.0 : 0.0);
    switch (want_dtype) {
      case attn::Dtype::Float32: {
        const float want = float(d), got = t.data_ptr<float>()[k];
        FUZZ_CHECK(std::memcmp(&want, &got, sizeof want) == 0);
        break;
      }
      case attn::Dtype::Int64: {
        const int64_t want = l.kind == Kind::Int ? l.i : int64_t(d);  // C++ truncation, as torch
        FUZZ_CHECK(t.data_ptr<int64_t>()[k] == want);
        break;
      }
      case attn::Dtype::Bool: FUZZ_CHECK(t.data_ptr<bool>()[k] == (d != 0.0)); break;
      // Through float, as torch.tensor(..., dtype=torch.bfloat16) rounds a Python number.
      case attn::Dtype::BFloat16:
        FUZZ_CHECK(t.data_ptr<attn::BFloat16>()[k].bits == attn::BFloat16(float(d)).bits);
        break;
      case attn::Dtype::Float16:
        FUZZ_CHECK(t.data_ptr<attn::Half>()[k].bits == attn::Half(float(d)).bits);
        break;
    }
  }
  return 0;
}
