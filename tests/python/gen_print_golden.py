#!/usr/bin/env python3
"""Generates the golden GoogleTest cases of tests/cpp/test_print.cpp from real PyTorch output.

    /usr/bin/python3 tests/python/gen_print_golden.py > /tmp/golden.inc

prints C++ TEST_F blocks; paste them between the "BEGIN GENERATED" and "END GENERATED" markers
of tests/cpp/test_print.cpp (they use the PrintTest fixture and the helpers defined above the
markers), then run clang-format -i on that file. Each case is a tensor, a sequence of
torch.set_printoptions calls and the suffixes attn's caller passes; the expected string is torch's
repr. Large tensors are not written out: their data comes from formulas that the C++ side
evaluates bit-identically (see arange_div and lcg).
"""

import math
import sys

import numpy as np
import torch

INT64_MIN = -(2**63)


# ---- data generators mirrored in test_print.cpp ----------------------------------------------


def arange_div(n, d):
    """float32(i) / float32(d) for i in range(n): one correctly rounded float32 division each."""
    return torch.arange(n, dtype=torch.float32) / float(d)


def lcg(n, seed):
    """Uniform values in [-2, 2) from a 32-bit LCG; every step is exact in float32."""
    x = seed
    out = []
    for _ in range(n):
        x = (x * 1664525 + 1013904223) % 2**32
        u = (x >> 8) / 2.0**24
        out.append((u - 0.5) * 4.0)
    return torch.tensor(out, dtype=torch.float32)


# ---- the cases --------------------------------------------------------------------------------


class G:
    """One golden case."""

    def __init__(self, name, tensor, options=(), suffixes=(), source=None, comment=None):
        self.name = name
        self.tensor = tensor
        self.options = list(options)  # successive kwargs dicts for torch.set_printoptions
        self.suffixes = list(suffixes)
        self.source = source  # None: literal data; else a C++ expression yielding the data
        self.comment = comment


def _f(values, shape=None):
    t = torch.tensor(values, dtype=torch.float32)
    return t.reshape(shape) if shape is not None else t


def golden_cases():
    inf, nan = math.inf, math.nan
    g = torch.Generator().manual_seed(42)
    c = []

    c.append(G("Matrix6x2", torch.rand(6, 2, generator=g), comment="seed shape, precision 4"))
    c.append(G("FourD1x2x3x3", torch.randn(1, 2, 3, 3, generator=g)))
    c.append(G("NegInfScoresGoScientific", _f([[-318.2692, -inf, 12.5], [-inf, 3.25, -0.001]])))
    c.append(G("NegInfScoresFixed", _f([[-318.2692, -inf, 12.5], [-inf, 3.25, -1.5]])))
    softmax = _f([[1.0, 0.0, 1e-40, 0.0], [0.25, 0.75, 0.0, 3e-41]])
    c.append(
        G(
            "SoftmaxPrecision3NoSciKeepsSciWidth",
            softmax,
            [dict(precision=3, sci_mode=False)],
            comment="width 9 comes from '9.999e-41', measured before sci_mode=False applies",
        )
    )
    c.append(G("SoftmaxAutoSci", softmax))
    c.append(G("Scalar", torch.tensor(1.2903)))
    c.append(G("ScalarIntMode", torch.tensor(3.0)))
    c.append(G("ScalarNegZero", torch.tensor(-0.0)))
    c.append(G("ScalarNaN", torch.tensor(nan)))
    c.append(G("ScalarBigSci", torch.tensor(1e9)))
    c.append(G("ScalarBigNoSci", torch.tensor(1e9), [dict(sci_mode=False)]))
    c.append(G("ScalarInt64", torch.tensor(-7)))
    c.append(G("ScalarBool", torch.tensor(False)))
    c.append(G("Int64Vector", torch.tensor([0, 4, 5, 2, 1, 3])))
    c.append(G("Int64MatrixPadded", torch.tensor([[-100, 5], [7, 123456]])))
    c.append(G("Int64Extremes", torch.tensor([INT64_MIN, 2**63 - 1, 0])))
    c.append(G("BoolMask", torch.tensor([[False, True, True], [False, False, True]])))
    c.append(G("BoolAllTrue", torch.tensor([True, True, True])))
    c.append(G("IntModeFloats", _f([[1, 0], [0, 1]])))
    c.append(G("IntModeNegInf", _f([[0, -inf, -inf, -inf], [0, 0, -inf, -inf]])))
    c.append(G("IntModeNegInfWithOne", _f([[0, -inf, 1], [-2, 0, -inf]])))
    c.append(G("IntModeBigGoesSci", _f([1e9, 1.0, -3.0])))
    c.append(G("IntModeRatioNoSci", _f([1.0, 5000.0]), [dict(sci_mode=False)]))
    c.append(G("NaNMixed", _f([nan, 1.5, -2.25, inf])))
    c.append(G("AllNaN", _f([nan, nan])))
    c.append(G("ZerosIgnoreSciMode", torch.zeros(2, 3), [dict(sci_mode=True)]))
    c.append(G("NegZeroInFixed", _f([-0.0, 0.0, 1.5])))
    c.append(G("SciAutoMixed", _f([1e-5, 1e3, 2.5, -0.5])))
    c.append(G("SciAutoBig", _f([1e9, 2.5])))
    c.append(G("SciAutoSmall", _f([3e-5, -5e-5])))
    c.append(G("SciForced", _f([0.5, 0.25]), [dict(sci_mode=True)]))
    c.append(G("SciWithNaNAndInf", _f([1e-5, nan, 1e3, -inf])))
    c.append(G("SciForcedPrecision2", _f([[1e-5, 3.0], [123.0, 1.0]]), [dict(precision=2)]))
    c.append(G("Vector30Wraps", arange_div(30, 7), source="arange_div(30, 7)"))
    c.append(G("Vector2000Summarized", arange_div(2000, 7), source="arange_div(2000, 7)"))
    c.append(G("Int64Vector1001Summarized", torch.arange(1001), source="iota64(1001)"))
    c.append(G("Matrix50x40Summarized", lcg(2000, 7).reshape(50, 40), source="lcg(2000, 7)"))
    c.append(G("ThreeDSummarized", lcg(1200, 11).reshape(10, 10, 12), source="lcg(1200, 11)"))
    c.append(G("ThreeDShortLeadingDim", lcg(1200, 13).reshape(3, 20, 20), source="lcg(1200, 13)"))
    c.append(G("EmptyVector", torch.zeros(0)))
    c.append(G("EmptyMatrix", torch.zeros(0, 3)))
    c.append(G("EmptyThreeD", torch.zeros(2, 0, 4)))
    c.append(G("EmptyInt64", torch.zeros(0, dtype=torch.int64)))
    c.append(G("EmptyBool", torch.zeros(3, 0, dtype=torch.bool)))
    c.append(G("EmptyWithRequiresGrad", torch.zeros(0, 3).requires_grad_()))
    c.append(
        G(
            "SuffixWrapsPastLinewidth",
            arange_div(18, 3).requires_grad_(),
            source="arange_div(18, 3)",
            comment="last line + ', requires_grad=True' would pass 80 columns",
        )
    )
    c.append(G("SuffixFitsOnLastLine", arange_div(12, 3).requires_grad_(), source="arange_div(12, 3)"))
    c.append(
        G(
            "SuffixSingleLineCountsTwoExtra",
            arange_div(6, 7).requires_grad_(),
            [dict(linewidth=76)],
            source="arange_div(6, 7)",
            comment="without a newline torch takes the line length as len + 2: 57 + 2 + 18 > 76",
        )
    )
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    b = torch.tensor([[0.5, -1.0], [0.25, 2.0]])
    c.append(G("GradFnSuffix", a @ b))
    c.append(G("LinewidthSmall", lcg(20, 3).reshape(4, 5), [dict(linewidth=20)], source="lcg(20, 3)"))
    c.append(G("LinewidthTiny", lcg(9, 5).reshape(3, 3), [dict(linewidth=5)], source="lcg(9, 5)"))
    c.append(G("Precision0", lcg(9, 17).reshape(3, 3), [dict(precision=0)], source="lcg(9, 17)"))
    c.append(G("Precision8", lcg(9, 19).reshape(3, 3), [dict(precision=8)], source="lcg(9, 19)"))
    c.append(G("Threshold5", torch.arange(10), [dict(threshold=5)], source="iota64(10)"))
    c.append(
        G(
            "EdgeItems1",
            lcg(210, 23).reshape(5, 6, 7),
            [dict(threshold=10, edgeitems=1)],
            source="lcg(210, 23)",
        )
    )
    c.append(
        G(
            "EdgeItems0VectorShowsAll",
            torch.arange(5),
            [dict(threshold=3, edgeitems=0)],
            source="iota64(5)",
            comment="self[-0:] is the whole vector",
        )
    )
    c.append(G("EdgeItems0Matrix", torch.ones(3, 3), [dict(threshold=3, edgeitems=0)]))
    c.append(G("ProfileShort", lcg(400, 29).reshape(20, 20), [dict(profile="short")], source="lcg(400, 29)"))
    c.append(G("ProfileFull", torch.arange(1200), [dict(profile="full")], source="iota64(1200)"))
    c.append(
        G(
            "SetPrintOptionsResetsSciMode",
            _f([0.5, 0.25]),
            [dict(sci_mode=True), dict(precision=2)],
            comment="torch assigns sci_mode on every call, so precision=2 alone turns it off",
        )
    )
    return c


# ---- C++ emission -----------------------------------------------------------------------------


def cpp_float(v):
    v = float(v)
    if math.isnan(v):
        return "kNaN"
    if math.isinf(v):
        return "kInf" if v > 0 else "-kInf"
    s = str(np.float32(v))
    if "." not in s and "e" not in s:
        s += ".0"
    return s + "f"


def cpp_int(v):
    if v == INT64_MIN:
        return "std::numeric_limits<int64_t>::min()"
    return str(v)


def cpp_string(text):
    lines = text.split("\n")
    parts = []
    for i, line in enumerate(lines):
        esc = line.replace("\\", "\\\\").replace('"', '\\"')
        parts.append('"' + esc + ("\\n" if i + 1 < len(lines) else "") + '"')
    return parts


def cpp_options(opts):
    names = ["precision", "threshold", "edgeitems", "linewidth", "sci_mode", "profile"]
    args = []
    for n in names:
        if n not in opts:
            args.append("{}")
        elif n == "sci_mode":
            v = opts[n]
            args.append("std::optional<bool>{}" if v is None else ("std::optional<bool>(true)" if v else "std::optional<bool>(false)"))
        elif n == "profile":
            args.append('std::string("{}")'.format(opts[n]))
        else:
            args.append(str(opts[n]))
    while args and args[-1] == "{}":
        args.pop()
    return "set_printoptions({});".format(", ".join(args))


def suffixes_of(t):
    if t.grad_fn is not None:
        return ["grad_fn=<{}>".format(type(t.grad_fn).__name__)]
    if t.requires_grad:
        return ["requires_grad=True"]
    return []


def torch_repr(case):
    torch.set_printoptions(profile="default")
    try:
        for o in case.options:
            torch.set_printoptions(**o)
        return repr(case.tensor)
    finally:
        torch.set_printoptions(profile="default")


def emit(case, out):
    t = case.tensor
    try:
        expected = torch_repr(case)
    except RuntimeError:
        expected = None
    shape = "{" + ", ".join(str(s) for s in t.shape) + "}"
    dtype = {torch.float32: "Float32", torch.int64: "Int64", torch.bool: "Bool"}[t.dtype]
    flat = t.detach().reshape(-1).tolist()
    out.write("TEST_F(PrintTest, {}) {{\n".format(case.name))
    if case.comment:
        out.write("  // {}\n".format(case.comment))
    for o in case.options:
        out.write("  {}\n".format(cpp_options(o)))
    if case.source is not None:
        out.write("  auto data = {};\n".format(case.source))
    elif t.dtype == torch.float32:
        out.write("  std::vector<float> data = {{{}}};\n".format(", ".join(cpp_float(v) for v in flat)))
    elif t.dtype == torch.int64:
        out.write("  std::vector<int64_t> data = {{{}}};\n".format(", ".join(cpp_int(v) for v in flat)))
    else:
        out.write("  std::vector<uint8_t> data = {{{}}};\n".format(", ".join("1" if v else "0" for v in flat)))
    sfx = suffixes_of(t)
    sfx_arg = ""
    if sfx:
        sfx_arg = ", {" + ", ".join('"{}"'.format(s) for s in sfx) + "}"
    call = "format_tensor({}, Dtype::{}, data.data(){})".format(shape, dtype, sfx_arg)
    if expected is None:
        out.write("  EXPECT_THROW({}, Error);\n".format(call))
    else:
        out.write("  EXPECT_EQ({},\n".format(call))
        parts = cpp_string(expected)
        for i, p in enumerate(parts):
            out.write("            {}{}\n".format(p, ");" if i + 1 == len(parts) else ""))
    out.write("}\n\n")


def main():
    out = sys.stdout
    out.write("// Generated by tests/python/gen_print_golden.py from torch {}.\n\n".format(torch.__version__))
    for case in golden_cases():
        emit(case, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
