// attn._C.flex: flex_attention's tracer values (Expr), traced modifiers, block masks and the op.
// The Python side (python/attn/nn/attention/flex_attention.py) calls a score_mod or mask_mod once
// with Expr values; their operators and attn's math functions on them record the program.
#include <attn/flex.h>
#include <pybind11/functional.h>
#include <pybind11/operators.h>
#include <pybind11/stl.h>

#include <string>

#include "bindings.h"
#include "convert.h"

namespace attn::python {

namespace {

using flex::Expr;

// Python's truth, float(), int() and index of a traced value: refused, naming the construct.
[[noreturn]] void untraceable(const std::string& what) {
  throw py::type_error(
      "flex_attention: " + what +
      " of a traced value: the modifier's code runs once on symbolic values, so data-dependent "
      "Python control flow and conversions cannot be traced; use torch.where(cond, a, b), & | ~ "
      "instead of and/or/not/if, and torch.* math instead of math.*");
}

Expr::Type expr_type(const py::object& dtype) {
  const std::optional<Dtype> d = to_dtype(dtype);
  if (!d) throw py::type_error("flex_attention: .to() needs a dtype");
  if (*d == Dtype::Float32) return Expr::Type::Float;
  if (*d == Dtype::Int64) return Expr::Type::Int;
  if (*d == Dtype::Bool) return Expr::Type::Bool;
  throw py::type_error("flex_attention: traced values are float32, integer or bool");
}

}  // namespace

void register_flex(py::module_& root) {
  py::module_ m = root.def_submodule("flex", "flex_attention's tracer and kernels");

  py::class_<Expr> E(m, "Expr");
  // Constants: bool before int before float (Python's bool is an int; an int converts to float).
  E.def(py::init<bool>()).def(py::init<int64_t>()).def(py::init<double>());
  py::implicitly_convertible<bool, Expr>();
  py::implicitly_convertible<int64_t, Expr>();
  py::implicitly_convertible<double, Expr>();
  E.def("__repr__", [](const Expr& e) { return "<traced " + e.str() + ">"; })
      .def_property_readonly("dtype_name",
                             [](const Expr& e) {
                               return e.type() == Expr::Type::Float ? "float32"
                                      : e.type() == Expr::Type::Int ? "int32"
                                                                    : "bool";
                             })
      .def("__bool__", [](const Expr&) -> bool { untraceable("bool(), if, and, or, not"); })
      .def("__float__", [](const Expr&) -> double { untraceable("float() or math.*"); })
      .def("__int__", [](const Expr&) -> int64_t { untraceable("int()"); })
      .def("__index__", [](const Expr&) -> int64_t { untraceable("use as a Python index"); })
      .def("item", [](const Expr&) -> double { untraceable(".item()"); })
      .def("__len__", [](const Expr&) -> int64_t { untraceable("len()"); })
      .def("__iter__", [](const Expr&) -> py::object { untraceable("iteration"); })
      .def(
          "__add__", [](const Expr& a, const Expr& b) { return a + b; }, py::is_operator())
      .def(
          "__radd__", [](const Expr& a, const Expr& b) { return b + a; }, py::is_operator())
      .def(
          "__sub__", [](const Expr& a, const Expr& b) { return a - b; }, py::is_operator())
      .def(
          "__rsub__", [](const Expr& a, const Expr& b) { return b - a; }, py::is_operator())
      .def(
          "__mul__", [](const Expr& a, const Expr& b) { return a * b; }, py::is_operator())
      .def(
          "__rmul__", [](const Expr& a, const Expr& b) { return b * a; }, py::is_operator())
      .def(
          "__truediv__", [](const Expr& a, const Expr& b) { return a / b; }, py::is_operator())
      .def(
          "__rtruediv__", [](const Expr& a, const Expr& b) { return b / a; }, py::is_operator())
      .def(
          "__floordiv__", [](const Expr& a, const Expr& b) { return flex::floor_divide(a, b); },
          py::is_operator())
      .def(
          "__rfloordiv__", [](const Expr& a, const Expr& b) { return flex::floor_divide(b, a); },
          py::is_operator())
      .def(
          "__mod__", [](const Expr& a, const Expr& b) { return a % b; }, py::is_operator())
      .def(
          "__rmod__", [](const Expr& a, const Expr& b) { return b % a; }, py::is_operator())
      .def(
          "__pow__", [](const Expr& a, const Expr& b) { return flex::pow(a, b); },
          py::is_operator())
      .def(
          "__rpow__", [](const Expr& a, const Expr& b) { return flex::pow(b, a); },
          py::is_operator())
      .def(
          "__eq__", [](const Expr& a, const Expr& b) { return a == b; }, py::is_operator())
      .def(
          "__ne__", [](const Expr& a, const Expr& b) { return a != b; }, py::is_operator())
      .def(
          "__lt__", [](const Expr& a, const Expr& b) { return a < b; }, py::is_operator())
      .def(
          "__le__", [](const Expr& a, const Expr& b) { return a <= b; }, py::is_operator())
      .def(
          "__gt__", [](const Expr& a, const Expr& b) { return a > b; }, py::is_operator())
      .def(
          "__ge__", [](const Expr& a, const Expr& b) { return a >= b; }, py::is_operator())
      .def(
          "__and__", [](const Expr& a, const Expr& b) { return a & b; }, py::is_operator())
      .def(
          "__rand__", [](const Expr& a, const Expr& b) { return b & a; }, py::is_operator())
      .def(
          "__or__", [](const Expr& a, const Expr& b) { return a | b; }, py::is_operator())
      .def(
          "__ror__", [](const Expr& a, const Expr& b) { return b | a; }, py::is_operator())
      .def(
          "__xor__", [](const Expr& a, const Expr& b) { return a ^ b; }, py::is_operator())
      .def(
          "__rxor__", [](const Expr& a, const Expr& b) { return b ^ a; }, py::is_operator())
      .def("__neg__", [](const Expr& a) { return -a; })
      .def("__pos__", [](const Expr& a) { return a; })
      .def("__invert__", [](const Expr& a) { return ~a; })
      .def("__abs__", [](const Expr& a) { return flex::abs(a); })
      .def("abs", [](const Expr& a) { return flex::abs(a); })
      .def("exp", [](const Expr& a) { return flex::exp(a); })
      .def("log", [](const Expr& a) { return flex::log(a); })
      .def("sqrt", [](const Expr& a) { return flex::sqrt(a); })
      .def("rsqrt", [](const Expr& a) { return flex::rsqrt(a); })
      .def("tanh", [](const Expr& a) { return flex::tanh(a); })
      .def("sigmoid", [](const Expr& a) { return flex::sigmoid(a); })
      .def("sin", [](const Expr& a) { return flex::sin(a); })
      .def("cos", [](const Expr& a) { return flex::cos(a); })
      .def("floor", [](const Expr& a) { return flex::floor(a); })
      .def("ceil", [](const Expr& a) { return flex::ceil(a); })
      .def("square", [](const Expr& a) { return a * a; })
      .def("logical_not", [](const Expr& a) { return !a; })
      .def("float", [](const Expr& a) { return flex::to(a, Expr::Type::Float); })
      .def("int", [](const Expr& a) { return flex::to(a, Expr::Type::Int); })
      .def("long", [](const Expr& a) { return flex::to(a, Expr::Type::Int); })
      .def("bool", [](const Expr& a) { return flex::to(a, Expr::Type::Bool); })
      .def("to",
           [](const Expr& a, const py::object& dtype) { return flex::to(a, expr_type(dtype)); })
      .def(
          "clamp",
          [](const Expr& x, std::optional<Expr> lo, std::optional<Expr> hi) {
            return flex::clamp(x, lo, hi);
          },
          py::arg("min") = py::none(), py::arg("max") = py::none());
  E.attr("__hash__") = py::none();

  // attn's own functions on traced values (torch.tanh(score) in a score_mod): overloads tried
  // after the tensor ones, taking only Expr (a Python number stays an error, as before).
  auto unary = [&root](const char* name, Expr (*f)(const Expr&)) {
    const std::string n = name;
    root.def(name, [n, f](const py::object& x) {
      if (!py::isinstance<Expr>(x)) throw py::type_error(n + "(): argument 'input' must be Tensor");
      return f(x.cast<Expr>());
    });
  };
  unary("abs", &flex::abs);
  unary("exp", &flex::exp);
  unary("log", &flex::log);
  unary("sqrt", &flex::sqrt);
  unary("rsqrt", &flex::rsqrt);
  unary("tanh", &flex::tanh);
  unary("sigmoid", &flex::sigmoid);
  unary("sin", &flex::sin);
  unary("cos", &flex::cos);
  unary("square", [](const Expr& a) { return a * a; });
  auto binary = [&root](const char* name, Expr (*f)(const Expr&, const Expr&)) {
    const std::string n = name;
    root.def(name, [n, f](const py::object& a, const py::object& b) {
      if (!py::isinstance<Expr>(a) && !py::isinstance<Expr>(b))
        throw py::type_error(n + "(): arguments must be Tensors");
      return f(a.cast<Expr>(), b.cast<Expr>());
    });
  };
  binary("minimum", &flex::minimum);
  binary("maximum", &flex::maximum);
  root.def(
      "clamp",
      [](const Expr& x, std::optional<Expr> lo, std::optional<Expr> hi) {
        return flex::clamp(x, lo, hi);
      },
      py::arg("input"), py::arg("min") = py::none(), py::arg("max") = py::none());

  m.def("where", &flex::where);
  m.def("minimum", &flex::minimum);
  m.def("maximum", &flex::maximum);
  m.def("pow", &flex::pow);
  m.def("remainder", [](const Expr& a, const Expr& b) { return a % b; });
  m.def("floor_divide", &flex::floor_divide);
  m.def("to", [](const Expr& a, const py::object& dtype) { return flex::to(a, expr_type(dtype)); });

  // A captured tensor's element at traced indices (tensor[i, j]); `context` lends its trace to a
  // read without traced indices (a 0-dim tensor).
  m.def("load", [](const Tensor& t, const std::vector<Expr>& index, const Expr& context) {
    return flex::Captured(t).at(index, context);
  });

  py::class_<flex::Modifier>(m, "Modifier")
      .def(py::init<>())
      .def_property_readonly("is_mask", &flex::Modifier::is_mask)
      .def_property_readonly("captured", &flex::Modifier::captured)
      .def("__str__", &flex::Modifier::str);
  m.def("begin_trace", &flex::begin_trace, py::arg("mask"));
  m.def("finish_trace", &flex::finish_trace, py::arg("leaves"), py::arg("result"), py::arg("mask"));

  py::class_<BlockMask>(m, "BlockMask")
      .def_readonly("B", &BlockMask::B)
      .def_readonly("H", &BlockMask::H)
      .def_readonly("Q_LEN", &BlockMask::Q_LEN)
      .def_readonly("KV_LEN", &BlockMask::KV_LEN)
      .def_readonly("Q_BLOCK_SIZE", &BlockMask::Q_BLOCK_SIZE)
      .def_readonly("KV_BLOCK_SIZE", &BlockMask::KV_BLOCK_SIZE)
      .def_property_readonly("mask_mod", &BlockMask::mask_mod)
      .def_property_readonly("kv_num_blocks", &BlockMask::kv_num_blocks)
      .def_property_readonly("kv_indices", &BlockMask::kv_indices)
      .def_property_readonly("full_kv_num_blocks", &BlockMask::full_kv_num_blocks)
      .def_property_readonly("full_kv_indices", &BlockMask::full_kv_indices)
      .def("to_dense", &BlockMask::to_dense)
      .def("sparsity", &BlockMask::sparsity)
      .def("__repr__", &BlockMask::str);
  m.def(
      "create_block_mask",
      [](const flex::Modifier& mod, int64_t B, int64_t H, int64_t Q, int64_t KV, int64_t qb,
         int64_t kb) { return create_block_mask(mod, B, H, Q, KV, qb, kb); },
      release());
  m.def(
      "flex_attention",
      // (out, lse, max_scores); max_scores is None unless asked for.
      [](const Tensor& q, const Tensor& k, const Tensor& v, const flex::Modifier& score_mod,
         const BlockMask* block_mask, std::optional<double> scale, bool enable_gqa,
         bool max_scores) {
        FlexOptions o;
        o.scale = scale;
        o.enable_gqa = enable_gqa;
        Tensor mx;
        auto [out, lse] =
            flex_attention_with_lse(q, k, v, score_mod, block_mask, o, max_scores ? &mx : nullptr);
        return std::make_tuple(out, lse, max_scores ? std::optional<Tensor>(mx) : std::nullopt);
      },
      release());
}

}  // namespace attn::python
