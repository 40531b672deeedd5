#!/usr/bin/env python3
"""Torch side of the tensor-printing parity check.

`cases()` returns a list of `Case`s (a tensor plus the torch.set_printoptions keyword arguments to
print it with); `torch_repr(case)` prints one exactly as PyTorch 1.13 does. A pytest can later
build the same tensor in attn, apply the same options and compare reprs.

Run standalone to print every case:

    python3 tests/python/print_parity.py                 # name, options and torch's repr
    python3 tests/python/print_parity.py --dump FILE     # a line-oriented file for a C++ driver

The dump format, one block per case:

    CASE <name>
    SHAPE <d0> <d1> ...                  (nothing after SHAPE for a 0-dim tensor)
    DTYPE float32|int64|bool
    OPTS <precision> <threshold> <edgeitems> <linewidth> <sci_mode: -1 auto, 0, 1>
    SUFFIXES <n>                          followed by n lines
    DATA <numel>                          followed by one line of space-separated values
                                          (float.hex() of each float32, ints, 0/1 for bool)
    REPR <n>                              followed by n lines of torch's repr ("!ERROR" if torch
                                          raised; attn is then expected to raise too)

threshold is written as 9223372036854775807 when torch holds inf (profile="full").
"""

import argparse
import math
import sys
from dataclasses import dataclass, field

import torch

INT64_MAX = 2**63 - 1


@dataclass
class Case:
    name: str
    tensor: torch.Tensor
    options: dict = field(default_factory=dict)  # kwargs for torch.set_printoptions


def _set_options(options):
    torch.set_printoptions(profile="default")
    if options:
        torch.set_printoptions(**options)


def torch_repr(case):
    """torch's repr of case.tensor under case.options; the options are reset afterwards."""
    _set_options(case.options)
    try:
        return repr(case.tensor)
    finally:
        torch.set_printoptions(profile="default")


def effective_options(case):
    """(precision, threshold, edgeitems, linewidth, sci_mode) as torch holds them for the case."""
    _set_options(case.options)
    o = torch._tensor_str.PRINT_OPTS
    thr = o.threshold
    thr = INT64_MAX if thr == math.inf else int(thr)
    res = (int(o.precision), thr, int(o.edgeitems), int(o.linewidth), o.sci_mode)
    torch.set_printoptions(profile="default")
    return res


def suffixes_of(t):
    """The suffixes attn's caller would pass for t (grad_fn or requires_grad)."""
    if t.grad_fn is not None:
        return ["grad_fn=<{}>".format(type(t.grad_fn).__name__)]
    if t.requires_grad:
        return ["requires_grad=True"]
    return []


def _f(values, shape=None):
    t = torch.tensor(values, dtype=torch.float32)
    return t.reshape(shape) if shape is not None else t


def edge_cases():
    inf, nan = math.inf, math.nan
    g = torch.Generator().manual_seed(1234)
    c = []
    add = lambda name, t, **opts: c.append(Case(name, t, opts))  # noqa: E731

    add("scalar", torch.tensor(1.2903))
    add("scalar_int_float", torch.tensor(3.0))
    add("scalar_neg_zero", torch.tensor(-0.0))
    add("scalar_nan", torch.tensor(nan))
    add("scalar_inf", torch.tensor(-inf))
    add("scalar_tiny", torch.tensor(1e-40))
    add("scalar_big", torch.tensor(1e9))
    add("scalar_big_nosci", torch.tensor(1e9), sci_mode=False)
    add("scalar_int64", torch.tensor(-7))
    add("scalar_bool", torch.tensor(True))
    add("matrix_6x2", torch.rand(6, 2, generator=g))
    add("4d_1x2x3x3", torch.randn(1, 2, 3, 3, generator=g))
    add("neg_inf_scores", _f([[-318.2692, -inf, 12.5], [-inf, 3.25, -0.001]]))
    softmax = torch.tensor([[1.0, 0.0, 1e-40], [0.3, 0.7, 0.0]])
    add("softmax_p3_nosci", softmax, precision=3, sci_mode=False)
    add("softmax_auto", softmax)
    add("int64_vec", torch.tensor([0, 4, 5, 2, 1, 3]))
    add("int64_neg", torch.tensor([[-100, 5], [7, 123456]]))
    add("int64_extremes", torch.tensor([-(2**63), 2**63 - 1, 0]))
    add("bool_mask", torch.tensor([[False, True, True], [False, False, True]]))
    add("bool_all_true", torch.tensor([True, True]))
    add("int_mode", _f([[1, 0], [0, 1]]))
    add("int_mode_neg_inf", _f([[0, -inf, -inf], [0, 0, -inf]]))
    add("int_mode_only_inf", _f([0, -inf]))
    add("int_mode_big", _f([1e9, 1.0, -3.0]))
    add("int_mode_ratio", _f([1.0, 5000.0]))
    add("int_mode_ratio_nosci", _f([1.0, 5000.0]), sci_mode=False)
    add("nan_mixed", _f([nan, 1.5, -2.25, inf]))
    add("all_nan", _f([nan, nan]))
    add("zeros", torch.zeros(2, 3))
    add("zeros_sci", torch.zeros(2, 3), sci_mode=True)
    add("neg_zeros", _f([-0.0, 0.0, 1.5]))
    add("sci_auto_mixed", _f([1e-5, 1e3, 2.5]))
    add("sci_auto_big", _f([1e9, 2.5]))
    add("sci_auto_small", _f([3e-5, 5e-5]))
    add("sci_forced", _f([0.5, 0.25]), sci_mode=True)
    add("sci_nan", _f([1e-5, nan, 1e3, -inf]))
    add("subnormal", _f([1e-45, 1e-40, 1.0]))
    add("vec30", torch.arange(30, dtype=torch.float32) / 7)
    add("vec30_grad", (torch.arange(30, dtype=torch.float32) / 7).requires_grad_())
    add("vec2000", torch.arange(2000, dtype=torch.float32) / 7)
    add("vec1001_int", torch.arange(1001))
    add("mat_50x40", torch.randn(50, 40, generator=g))
    add("3d_summarized", torch.randn(10, 10, 12, generator=g))
    add("3d_short_dim", torch.randn(3, 20, 20, generator=g))
    add("bool_big", torch.rand(40, 40, generator=g) > 0.5)
    add("empty_1d", torch.zeros(0))
    add("empty_2d", torch.zeros(0, 3))
    add("empty_3d", torch.zeros(2, 0, 4))
    add("empty_int", torch.zeros(0, dtype=torch.int64))
    add("empty_bool", torch.zeros(3, 0, dtype=torch.bool))
    add("empty_grad", torch.zeros(0, 3).requires_grad_())
    add("linewidth_small", torch.randn(4, 5, generator=g), linewidth=20)
    add("linewidth_tiny", torch.randn(3, 3, generator=g), linewidth=5)
    add("precision_0", torch.randn(3, 3, generator=g), precision=0)
    add("precision_8", torch.randn(3, 3, generator=g), precision=8)
    add("threshold_5", torch.arange(10), threshold=5)
    add("edgeitems_1", torch.randn(5, 6, 7, generator=g), threshold=10, edgeitems=1)
    add("edgeitems_0_vec", torch.arange(5), threshold=3, edgeitems=0)
    add("edgeitems_0_mat", torch.ones(3, 3), threshold=3, edgeitems=0)
    add("profile_short", torch.randn(20, 20, generator=g), profile="short")
    add("profile_full", torch.arange(1200), profile="full")
    add("suffix_wrap", torch.arange(19, dtype=torch.float32).requires_grad_())
    return c


def _random_tensor(g, shape, kind):
    numel = 1
    for s in shape:
        numel *= s
    if kind == "int64":
        hi = int(10 ** torch.randint(1, 12, (1,), generator=g).item())
        return torch.randint(-hi, hi, shape, generator=g, dtype=torch.int64)
    if kind == "bool":
        return torch.rand(shape, generator=g) > 0.5
    scale = 10.0 ** float(torch.randint(-12, 12, (1,), generator=g).item())
    if kind == "randn":
        t = torch.randn(shape, generator=g) * scale
    elif kind == "rand":
        t = torch.rand(shape, generator=g) * scale
    elif kind == "intfloat":
        t = torch.randint(-50, 50, shape, generator=g).float()
        if torch.rand(1, generator=g).item() < 0.3:
            t = t * 1e7
    elif kind == "wide":
        exps = torch.randint(-45, 38, shape, generator=g).double()
        t = (torch.randn(shape, generator=g).double() * 10.0**exps).float()
    else:  # "special": mixtures of zeros and non-finite values
        t = torch.randn(shape, generator=g) * scale
        r = torch.rand(shape, generator=g)
        t[r < 0.15] = 0.0
        t[(r >= 0.15) & (r < 0.25)] = math.nan
        t[(r >= 0.25) & (r < 0.3)] = math.inf
        t[(r >= 0.3) & (r < 0.35)] = -math.inf
        if torch.rand(1, generator=g).item() < 0.5:
            t = t.round()
    return t


def random_cases(n=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    kinds = ["randn", "rand", "intfloat", "wide", "special", "int64", "bool"]
    c = []
    for i in range(n):
        ndim = int(torch.randint(0, 5, (1,), generator=g).item())
        big = torch.rand(1, generator=g).item() < 0.25
        max_size = 40 if big else 7
        shape = tuple(int(torch.randint(1, max_size + 1, (1,), generator=g).item()) for _ in range(ndim))
        if ndim > 0 and torch.rand(1, generator=g).item() < 0.03:
            shape = shape[:-1] + (0,)
        kind = kinds[int(torch.randint(0, len(kinds), (1,), generator=g).item())]
        t = _random_tensor(g, shape, kind)
        opts = {}
        r = torch.rand(6, generator=g).tolist()
        if r[0] < 0.3:
            opts["precision"] = int(torch.randint(0, 9, (1,), generator=g).item())
        if r[1] < 0.3:
            opts["linewidth"] = int(torch.randint(10, 200, (1,), generator=g).item())
        if r[2] < 0.3:
            opts["threshold"] = int(torch.randint(1, 200, (1,), generator=g).item())
        if r[3] < 0.3:
            opts["edgeitems"] = int(torch.randint(1, 5, (1,), generator=g).item())
        if r[4] < 0.3:
            opts["sci_mode"] = bool(torch.rand(1, generator=g).item() < 0.5)
        if r[5] < 0.1 and t.dtype == torch.float32:
            t = t.requires_grad_()
        c.append(Case("random_{}_{}".format(i, kind), t, opts))
    return c


def cases(n_random=300, seed=0):
    """Edge cases followed by n_random random tensors with random print options."""
    return edge_cases() + random_cases(n_random, seed)


_DTYPES = {torch.float32: "float32", torch.int64: "int64", torch.bool: "bool"}


def _data_line(t):
    flat = t.detach().reshape(-1).tolist()
    if t.dtype == torch.float32:
        return " ".join(float(v).hex() for v in flat)
    if t.dtype == torch.bool:
        return " ".join("1" if v else "0" for v in flat)
    return " ".join(str(v) for v in flat)


def dump(case_list, out):
    for case in case_list:
        t = case.tensor
        try:
            text = torch_repr(case)
        except RuntimeError:
            text = "!ERROR"
        prec, thr, edge, lw, sci = effective_options(case)
        sci_code = -1 if sci is None else int(sci)
        sfx = suffixes_of(t)
        lines = text.split("\n")
        out.write("CASE {}\n".format(case.name))
        out.write("SHAPE" + "".join(" {}".format(s) for s in t.shape) + "\n")
        out.write("DTYPE {}\n".format(_DTYPES[t.dtype]))
        out.write("OPTS {} {} {} {} {}\n".format(prec, thr, edge, lw, sci_code))
        out.write("SUFFIXES {}\n".format(len(sfx)))
        for s in sfx:
            out.write(s + "\n")
        out.write("DATA {}\n{}\n".format(t.numel(), _data_line(t)))
        out.write("REPR {}\n".format(len(lines)))
        for line in lines:
            out.write(line + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dump", help="write the line-oriented dump to this file")
    parser.add_argument("--random", type=int, default=300, help="number of random cases")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    case_list = cases(args.random, args.seed)
    if args.dump:
        with open(args.dump, "w") as f:
            dump(case_list, f)
        print("wrote {} cases to {}".format(len(case_list), args.dump))
        return 0
    for case in case_list:
        print("# {} {}".format(case.name, case.options))
        try:
            print(torch_repr(case))
        except RuntimeError as e:
            print("!ERROR {}".format(e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
