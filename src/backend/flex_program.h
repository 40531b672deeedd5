// The program of a programmable attention modifier (flex_attention's score_mod and mask_mod): what
// tracing a C++ or Python function of (score, b, h, q_idx, kv_idx) records, and what a kernel
// evaluates tile by tile (backend/cpu/flex_eval.h). Plain structs on the standard library only.
//
// A program is a list of nodes in evaluation order (SSA: a node reads only nodes before it). Each
// node has a type: Bool, Int (32-bit, as torch's int32 index tensors) or Float (float32). The
// tracer inserts the conversions, so every operation's operands have the type it needs:
//   arithmetic (Add .. Max, Pow): both operands Int or both Float; Div and Pow are Float only
//   comparisons: both operands of one type, the result Bool
//   And, Or, Xor: Bool or Int (bitwise); Not: Bool
//   Where: a Bool condition, two operands of the result's type
//   Load: an element of a captured tensor, at `rank` Int index nodes (load_index[first ..])
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attn::kernels::flex {

enum class Type : uint8_t { Bool, Int, Float };

enum class Op : uint8_t {
  // leaves: the score (Float), its coordinates (Int), a constant, a captured tensor's element
  Score,
  Batch,
  Head,
  QIdx,
  KvIdx,
  Const,
  Load,
  // unary
  Neg,
  Abs,
  Exp,
  Log,
  Sqrt,
  Tanh,
  Sigmoid,
  Sin,
  Cos,
  Floor,
  Ceil,
  Not,
  ToFloat,
  ToInt,
  ToBool,
  // binary
  Add,
  Sub,
  Mul,
  Div,
  FloorDiv,
  Mod,
  Min,
  Max,
  Pow,
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge,
  And,
  Or,
  Xor,
  // ternary
  Where,
};

// The name of an operation as the tracer's messages spell it.
inline const char* op_name(Op op) {
  static const char* const names[] = {
      "score",   "b",       "h",     "q_idx", "kv_idx",      "constant",     "load",
      "neg",     "abs",     "exp",   "log",   "sqrt",        "tanh",         "sigmoid",
      "sin",     "cos",     "floor", "ceil",  "logical_not", "float",        "int",
      "bool",    "add",     "sub",   "mul",   "div",         "floor_divide", "remainder",
      "minimum", "maximum", "pow",   "eq",    "ne",          "lt",           "le",
      "gt",      "ge",      "and",   "or",    "xor",         "where"};
  return names[static_cast<int>(op)];
}

struct Node {
  Op op = Op::Const;
  Type type = Type::Float;
  int32_t a = -1, b = -1, c = -1;  // operands (node indices)
  float fvalue = 0.0f;             // Const of type Float
  int32_t ivalue = 0;              // Const of type Int or Bool
  int32_t tensor = -1;             // Load: index into Program::tensors
  int32_t first = 0;               // Load: its index nodes are load_index[first .. first + rank)
};

// A tensor a modifier captured: float32 (values), int64 (read as Int) or bool (at most 8 dims), on the CPU, read
// through its strides. grad (float32, contiguous in sizes) receives the gradient of a float
// tensor that requires it: the backward adds to it.
struct Captured {
  enum class Kind : uint8_t { Float32, Int64, Bool } kind = Kind::Float32;
  const void* data = nullptr;
  std::vector<int64_t> sizes, strides;
  bool requires_grad = false;
  std::string name;  // for messages: "captured tensor 0 (shape [8, 16])"
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
};

struct Program {
  std::vector<Node> nodes;
  std::vector<int32_t> load_index;
  std::vector<Captured> tensors;
  int32_t output = -1;
  bool empty() const { return output < 0; }
  // Whether the output depends on the score (a mask_mod's never does).
  bool uses_score() const {
    for (const Node& n : nodes)
      if (n.op == Op::Score) return true;
    return false;
  }
  // Whether any captured tensor requires grad (then the backward needs per-work-unit sums).
  bool wants_tensor_grads() const {
    for (const Captured& t : tensors)
      if (t.requires_grad) return true;
    return false;
  }
};

}  // namespace attn::kernels::flex
