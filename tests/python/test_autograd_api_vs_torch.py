"""attn.autograd against torch.autograd (1.13, the oracle): custom Functions, tensor hooks,
retain_grad, autograd.grad and autograd.backward over several tensors. Each case is one function
of the framework module `M`, run on torch and on attn with the same inputs; what it returns
(values, gradients, counts, grad_fn names) must agree. scripts/test.sh runs the file with torch 2.x
too, which also has setup_context and post-accumulate hooks to compare."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402


def arr(shape, seed):
    return np.random.RandomState(seed).standard_normal(shape).astype(np.float32)


def as_np(v):
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    if isinstance(v, (tuple, list)):
        return [as_np(x) for x in v]
    return v.detach().numpy()


def same(case):
    """case(M) on torch and attn; their results agree (floats to 1e-5 relative)."""
    want, got = as_np(case(torch)), as_np(case(attn))

    def check(w, g, where):
        if isinstance(w, list):
            assert isinstance(g, list) and len(g) == len(w), where
            for i, (a, b) in enumerate(zip(w, g)):
                check(a, b, "%s[%d]" % (where, i))
        elif isinstance(w, np.ndarray):
            assert isinstance(g, np.ndarray) and g.shape == w.shape, (where, g, w)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=where)
        else:
            assert g == w, (where, g, w)

    check(want, got, "result")


def leaf(M, shape, seed):
    return M.tensor(arr(shape, seed), requires_grad=True)


def scaled_exp(M):
    """y = exp(x * w) * c, with c a Python number: forward(ctx, ...) style."""

    class ScaledExp(M.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, c):
            y = (x * w).exp() * c
            ctx.save_for_backward(x, w, y)
            ctx.c = c
            return y

        @staticmethod
        def backward(ctx, g):
            x, w, y = ctx.saved_tensors
            gx = g * y * w if ctx.needs_input_grad[0] else None
            gw = (g * y * x).sum(0) if ctx.needs_input_grad[1] else None
            return gx, gw, None

    return ScaledExp


def test_function_forward_backward_and_grad_fn_name():
    def case(M):
        x, w = leaf(M, (5, 3), 0), leaf(M, (3,), 1)
        y = scaled_exp(M).apply(x, w, 0.5)
        loss = (y * M.tensor(arr((5, 3), 2))).sum()
        loss.backward()
        return [y, x.grad, w.grad, type(y.grad_fn).__name__ if M is torch else y.grad_fn.name(),
                y.requires_grad]

    same(case)


def test_function_needs_input_grad_and_no_grad_inputs():
    def case(M):
        x = leaf(M, (4, 2), 3)
        w = M.tensor(arr((2,), 4))  # no grad: backward is told, and returns None for it
        seen = []

        class F(M.autograd.Function):
            @staticmethod
            def forward(ctx, x, w):
                return x * w

            @staticmethod
            def backward(ctx, g):
                seen.append(tuple(ctx.needs_input_grad))
                return g * 2, None

        F.apply(x, w).sum().backward()
        out = F.apply(w, w)  # nothing requires grad: a plain tensor
        return [x.grad, seen, out.requires_grad, out.grad_fn is None]

    same(case)


def test_function_setup_context_style_equals_ctx_style():
    # torch 1.13 has no setup_context; attn's two styles must give torch's ctx-style numbers.
    class ScaledExp2(attn.autograd.Function):
        @staticmethod
        def forward(x, w, c):
            return (x * w).exp() * c

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, w, c = inputs
            ctx.save_for_backward(x, w, output)

        @staticmethod
        def backward(ctx, g):
            x, w, y = ctx.saved_tensors
            return g * y * w, (g * y * x).sum(0), None

    def run(M, fn):
        x, w = leaf(M, (5, 3), 0), leaf(M, (3,), 1)
        (fn.apply(x, w, 0.5) ** 2).sum().backward()
        return x.grad.numpy(), w.grad.numpy()

    want = run(torch, scaled_exp(torch))
    for a, b in zip(run(attn, ScaledExp2), want):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    if hasattr(torch.autograd.Function, "setup_context"):  # torch 2.x's run: the same class
        T = type("ScaledExp2", (torch.autograd.Function,), {
            k: staticmethod(getattr(ScaledExp2, k))
            for k in ("forward", "setup_context", "backward")})
        for a, b in zip(run(torch, T), want):
            np.testing.assert_allclose(a, b, rtol=1e-5)


def test_function_saved_tensors_freed_and_version_checked():
    for M in (torch, attn):
        F = scaled_exp(M)
        x, w = leaf(M, (3, 2), 5), leaf(M, (2,), 6)
        y = F.apply(x, w, 2.0)
        s = y.sum()
        s.backward(retain_graph=True)
        s.backward()  # retained once: a second pass works and accumulates
        with pytest.raises(Exception, match="second time|freed"):
            s.backward()
        y2 = F.apply(x * 1.0, w, 2.0)
        with torch.no_grad() if M is torch else attn.no_grad():
            y2.mul_(2)  # y2 itself was saved
        with pytest.raises(Exception, match="modified by an inplace operation"):
            y2.sum().backward()


def test_function_errors():
    for M in (torch, attn):
        x = leaf(M, (3,), 7)

        class WrongCount(M.autograd.Function):
            @staticmethod
            def forward(ctx, x, y):
                return x * y

            @staticmethod
            def backward(ctx, g):
                return (g,)

        with pytest.raises(RuntimeError, match="incorrect number of gradients"):
            WrongCount.apply(x, x).sum().backward()

        class Raising(M.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                raise KeyError("from backward")

        with pytest.raises(KeyError, match="from backward"):
            Raising.apply(x).sum().backward()
        x.grad = None  # a failed pass: later passes still work
        (x * 3).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), np.full(3, 3.0))


def test_function_returning_its_input():
    def case(M):
        x = leaf(M, (4,), 8)

        class Ident(M.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x

            @staticmethod
            def backward(ctx, g):
                return g * 3

        y = Ident.apply(x)
        (y * y).sum().backward()
        return [y, x.grad, x.is_leaf, y.is_leaf]

    same(case)


def test_function_with_several_outputs():
    def case(M):
        x, w = leaf(M, (4, 3), 21), leaf(M, (3,), 22)

        class Split(M.autograd.Function):
            @staticmethod
            def forward(ctx, x, w):
                ctx.save_for_backward(x, w)
                return x * w, (x * x).sum(1), x.argmax(1)  # the last: integers, no gradient

            @staticmethod
            def backward(ctx, ga, gb, gi):
                x, w = ctx.saved_tensors
                return ga * w + gb[:, None] * 2 * x, (ga * x).sum(0)

        a, b, i = Split.apply(x, w)
        r = M.tensor(arr((4, 3), 23))
        ((a * r).sum() + (b * b).sum()).backward()
        g_both = [x.grad.clone(), w.grad.clone()]
        x.grad = None
        w.grad = None
        a, b, i = Split.apply(x, w)
        b.sum().backward()  # a gets no gradient: backward sees zeros for it
        return [a, b, i, g_both, x.grad, w.grad, a.requires_grad, i.requires_grad,
                a.grad_fn is not None, i.grad_fn is None]

    same(case)


def test_hooks_on_non_leaf_and_leaf():
    def case(M):
        x = leaf(M, (3, 4), 9)
        calls = []
        h = x * 2
        hook = h.register_hook(lambda g: (calls.append("h"), g * 10)[1])
        x.register_hook(lambda g: calls.append("x"))  # None: gradient unchanged
        loss = (h * h).sum() + h.sum()  # h used twice: its hook sees the sum, once
        loss.backward(retain_graph=True)
        g1 = x.grad.clone()
        hook.remove()
        x.grad = None
        loss.backward()
        return [g1, x.grad, calls]

    same(case)


def test_hook_replacing_a_leaf_gradient_and_hook_errors():
    def case(M):
        x = leaf(M, (5,), 10)
        x.register_hook(lambda g: g.clamp(-0.5, 0.5))
        (x * x * 3).sum().backward()
        return [x.grad]

    same(case)
    for M in (torch, attn):
        with pytest.raises(RuntimeError, match="doesn't require gradient"):
            M.ones(3).register_hook(lambda g: g)
        x = leaf(M, (2,), 11)
        y = x * 2
        y.register_hook(lambda g: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            y.sum().backward()


def test_retain_grad():
    def case(M):
        x = leaf(M, (2, 3), 12)
        a = x.exp()
        a.retain_grad()
        b = a * a
        # retain_grad keeps the gradient after the hooks. torch 2 does so whatever the order of
        # registration, 1.13 in registration order (attn does as torch 2): the hook comes first.
        b.register_hook(lambda g: g * 2)
        b.retain_grad()
        b.sum().backward(retain_graph=True)
        first = a.grad.clone()
        b.sum().backward()  # accumulates, as a leaf's
        x.retain_grad()  # a leaf: nothing changes
        return [first, a.grad, b.grad, x.grad, a.retains_grad, x.retains_grad]

    same(case)


def test_autograd_grad_several_outputs_and_inputs():
    def case(M):
        x, w = leaf(M, (4, 3), 13), leaf(M, (3,), 14)
        h = x * w
        y1, y2 = h.sum(1), (h * h).mean()
        r = M.tensor(arr((4,), 15))
        gx, gw, gh = M.autograd.grad([y1, y2], [x, w, h], grad_outputs=[r, None],
                                     retain_graph=True)
        (gw2,) = M.autograd.grad(y2, w)
        return [gx, gw, gh, gw2, x.grad, w.grad]

    same(case)


def test_autograd_grad_unused_inputs_and_errors():
    def case(M):
        x, z = leaf(M, (3,), 16), leaf(M, (3,), 17)
        y = (x * 2).sum()
        gx, gz = M.autograd.grad(y, [x, z], allow_unused=True, retain_graph=True)
        gx2, gz2 = M.autograd.grad(y, [x, z], materialize_grads=True) if M is attn else (
            gx, M.zeros(3))
        return [gx, gz, gx2, gz2]

    same(case)
    for M in (torch, attn):
        x, z = leaf(M, (3,), 16), leaf(M, (3,), 17)
        y = (x * 2).sum()
        with pytest.raises(RuntimeError, match="not have been used in the graph"):
            M.autograd.grad(y, [x, z], retain_graph=True)
        with pytest.raises(RuntimeError, match="does not require grad"):
            M.autograd.grad(y, [M.ones(3)], retain_graph=True)
        y = (x * x).sum()
        M.autograd.grad(y, x)
        with pytest.raises(Exception, match="second time"):
            M.autograd.grad(y, x)


def test_autograd_backward_several_roots():
    def case(M):
        x = leaf(M, (3, 2), 18)
        a, b = x * 3, (x * x).sum()
        M.autograd.backward([a, b], [M.tensor(arr((3, 2), 19)), None])
        return [x.grad]

    same(case)


def test_post_accumulate_grad_hook():
    # torch 1.13 lacks it (2.1+): the sums it must see, by hand.
    w0 = arr((4,), 20)
    w = attn.tensor(w0, requires_grad=True)
    seen = []
    handle = w.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.numpy().copy()))
    (w * w).sum().backward()
    (w * 3).sum().backward()
    handle.remove()
    (w * 3).sum().backward()
    assert len(seen) == 2
    np.testing.assert_allclose(seen[0], 2 * w0, rtol=1e-6)
    np.testing.assert_allclose(seen[1], 2 * w0 + 3, rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), 2 * w0 + 6, rtol=1e-6)
    with pytest.raises(Exception, match="leaf tensors that require grad"):
        (w * 2).register_post_accumulate_grad_hook(lambda p: None)
    if hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):  # torch 2.x's run too

        def case(M):
            w = leaf(M, (4,), 20)
            seen = []
            h = w.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.clone()))
            (w * w).sum().backward()
            (w * 3).sum().backward()
            h.remove()
            (w * 3).sum().backward()
            return [seen, w.grad]

        same(case)


def test_legacy_variable():
    def case(M):
        data = M.tensor([1.0, 2.0])
        x = M.autograd.Variable(data, requires_grad=True)
        y = M.autograd.Variable(x * 3)  # detached: a leaf that does not require grad
        (x * x).sum().backward()
        return [x.grad, x.requires_grad, data.requires_grad, y.requires_grad, y.grad_fn is None,
                y, x is data]

    same(case)
