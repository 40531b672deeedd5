"""attn from several Python threads at once (README "Thread safety").

Each thread runs attention forward and backward (fused scaled_dot_product_attention with causal
masking, boolean masks, key padding and a window), MultiheadAttention and a small GPT on its own
inputs, and every result must be bitwise the one the same inputs give on a single thread. Bitwise,
not within a tolerance, because nothing but the inputs decides the bits: attn's kernels split work
by the process-wide thread count, never by timing, and keep each element's order of summation
whatever the split (kernels/cpu/gemm.h, sdpa_fused_backward.h). The one exception is a parameter
that several threads' backward passes add into (a model shared by the threads): the additions
come in the threads' order, so its gradient is compared with the sum of the one-thread gradients
to float32 rounding (check_shared_module).

The last tests check that the threads really overlap: while a long kernel runs in one thread,
another thread keeps executing Python code, which it can only do if the kernel released the GIL.
"""
import threading
import time

import numpy as np
import pytest

import attn
import attn.nn as nn
import attn.nn.functional as F

N_THREADS = 6


def run_threads(fn, n=N_THREADS):
    """fn(i) on n threads released together; their results, or the first exception raised."""
    barrier = threading.Barrier(n)
    results, errors = [None] * n, [None] * n

    def body(i):
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as e:  # noqa: B902 (re-raised in the calling thread)
            errors[i] = e

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        if e is not None:
            raise e
    return results


def snapshot(*tensors):
    return [np.array(t.detach().numpy(), copy=True) for t in tensors]


def assert_same_bits(got, expected, what):
    assert len(got) == len(expected), what
    for j, (a, b) in enumerate(zip(got, expected)):
        assert a.shape == b.shape and a.dtype == b.dtype, "{} result {}".format(what, j)
        assert a.tobytes() == b.tobytes(), "{} result {}: values differ".format(what, j)


def randn(g, *shape):
    return attn.randn(*shape, generator=g)


# ---- each thread its own inputs, bitwise the one-thread results ----------------------------------

def sdpa_inputs(i):
    g = attn.Generator().manual_seed(100 + i)
    B, H, L, D = 2, 4, 96, 32
    cases = []
    for kwargs in (dict(is_causal=True),
                   dict(attn_mask=attn.rand(L, L, generator=g) > 0.3),
                   dict(key_padding_mask=attn.rand(B, L, generator=g) > 0.8, window=(17, 0)),
                   dict(attn_mask=attn.rand(L, L, generator=g) > 0.5, is_causal=False,
                        scale=0.3)):
        cases.append(([randn(g, B, H, L, D) for _ in range(4)], kwargs))
    return cases


def sdpa_run(cases):
    out = []
    for (q, k, v, w), kwargs in cases:
        q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, **kwargs)
        (o * w).sum().backward()
        out += snapshot(o, q.grad, k.grad, v.grad)
    return out


def test_fused_attention_forward_backward_in_threads_matches_one_thread():
    inputs = [sdpa_inputs(i) for i in range(N_THREADS)]
    expected = [sdpa_run(c) for c in inputs]
    for _ in range(2):
        got = run_threads(lambda i: sdpa_run(inputs[i]))
        for i in range(N_THREADS):
            assert_same_bits(got[i], expected[i], "thread {}".format(i))


def own_gpt_training(i):
    """Two AdamW steps of a GPT built in this thread: losses, logits and the final weights."""
    g = attn.Generator().manual_seed(400 + i)
    model = nn.GPT(vocab_size=48, block_size=32, n_layer=2, n_head=4, n_embd=64, generator=g)
    opt = model.configure_optimizers(weight_decay=0.1, learning_rate=1e-2, betas=(0.9, 0.99))
    x = attn.randint(48, (4, 32), generator=g)
    y = attn.randint(48, (4, 32), generator=g)
    out = []
    for _ in range(2):
        logits, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        out += snapshot(logits, loss)
    return out + snapshot(*model.parameters())


def test_gpt_training_steps_in_threads_match_one_thread():
    expected = [own_gpt_training(i) for i in range(N_THREADS)]
    got = run_threads(own_gpt_training)
    for i in range(N_THREADS):
        assert_same_bits(got[i], expected[i], "thread {}".format(i))


# ---- one module shared by every thread -----------------------------------------------------------

def check_shared_module(make, run):
    """make() -> a module, called twice for two identical ones: run(module, i) goes through the
    first once per i on this thread (zeroed gradients each time), then through the second on all
    threads at once, whose first backward passes these are. Each thread's results must be bitwise
    the one-thread ones, and each parameter's gradient the sum of the one-thread gradients to
    rounding: adding n float32 terms in two orders gives results at most 2 (n - 1) 2^-24 times
    the sum of their magnitudes apart (6e-7 for n = 6), and 1e-6 times it is allowed. (Not a
    tolerance relative to the result: a gradient that nearly cancels has partial sums far larger
    than itself, and their rounding shows.)"""
    reference, shared = make(), make()
    grad_sum = [np.zeros(p.shape, dtype=np.float32) for p in reference.parameters()]
    magnitude = [np.zeros(p.shape, dtype=np.float32) for p in reference.parameters()]
    expected = []
    for i in range(N_THREADS):
        reference.zero_grad()
        expected.append(run(reference, i))
        for s, m, p in zip(grad_sum, magnitude, reference.parameters()):
            s += p.grad.numpy()
            m += np.abs(p.grad.numpy())
    got = run_threads(lambda i: run(shared, i))
    for i in range(N_THREADS):
        assert_same_bits(got[i], expected[i], "thread {}".format(i))
    for j, (p, s, m) in enumerate(zip(shared.parameters(), grad_sum, magnitude)):
        excess = np.abs(p.grad.numpy() - s) - 1e-6 * m
        assert excess.max() <= 0, "parameter {}: {} beyond the bound".format(j, excess.max())


def test_shared_multihead_attention_forward_backward_in_threads():
    L, B = 24, 3
    causal = attn.ones(L, L, dtype=attn.bool).triu(1)  # True: may not attend
    inputs = []
    for i in range(N_THREADS):
        g = attn.Generator().manual_seed(200 + i)
        inputs.append((randn(g, L, B, 64), attn.rand(B, L, generator=g) > 0.85))

    def make():
        attn.manual_seed(7)
        return nn.MultiheadAttention(64, 4)

    def run(mha, i):
        x, padding = inputs[i]
        x = x.clone().requires_grad_()
        out, weights = mha(x, x, x, key_padding_mask=padding, attn_mask=causal,
                           need_weights=(i % 2 == 0))
        (out * out).sum().backward()
        return snapshot(out, x.grad) + (snapshot(weights) if weights is not None else [])

    check_shared_module(make, run)


def test_shared_gpt_forward_backward_and_generation_in_threads():
    def make():
        return nn.GPT(vocab_size=48, block_size=32, n_layer=2, n_head=4, n_embd=64,
                      generator=attn.Generator().manual_seed(5))

    def run(model, i):
        g = attn.Generator().manual_seed(300 + i)
        x = attn.randint(48, (2, 32), generator=g)
        y = attn.randint(48, (2, 32), generator=g)
        logits, loss = model(x, y)
        loss.backward()
        seen = []
        tokens = model.generate(x[:, :8], 6, top_k=10, generator=g, callback=seen.append)
        assert len(seen) == 6
        return snapshot(logits, loss, tokens)

    check_shared_module(make, run)


# ---- the GIL is released: another thread runs Python code meanwhile ------------------------------

def python_progress_during(kernel):
    """Runs kernel() while another thread appends time.monotonic() to a list about every
    millisecond; returns (start, end, stamps). The other thread needs the GIL for each stamp."""
    stamps, stop, started = [], threading.Event(), threading.Event()

    def ticker():
        started.set()
        while not stop.is_set():
            stamps.append(time.monotonic())
            time.sleep(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    started.wait()
    t0 = time.monotonic()
    kernel()
    t1 = time.monotonic()
    stop.set()
    t.join()
    return t0, t1, stamps


def matmul_kernel(n):
    a, b = attn.randn(n, n), attn.randn(n, n)
    return lambda: a @ b


def sdpa_forward_kernel(n):
    q, k, v = (attn.randn(1, 4, n, 64) for _ in range(3))
    return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)


def sdpa_backward_kernel(n):
    q, k, v = (attn.randn(1, 4, n, 64).requires_grad_() for _ in range(3))
    loss = F.scaled_dot_product_attention(q, k, v, is_causal=True).sum()
    return loss.backward


def gpt_forward_kernel(n):
    model = nn.GPT(vocab_size=64, block_size=64, n_layer=2, n_head=4, n_embd=128)
    x = attn.randint(64, (n // 16, 64))
    return lambda: model(x, x)


@pytest.mark.parametrize("make_kernel, n", [(matmul_kernel, 512), (sdpa_forward_kernel, 512),
                                            (sdpa_backward_kernel, 512), (gpt_forward_kernel, 256)],
                         ids=["matmul", "sdpa_forward", "sdpa_backward", "gpt_forward"])
def test_kernels_release_the_gil(make_kernel, n):
    """While one call runs, the ticker thread makes progress in the middle half of the call.

    With the GIL held for the whole call this is impossible (the ticker cannot execute a single
    bytecode), however the threads are scheduled; with it released, the ticker only needs to be
    scheduled once in that window (on a 2-core machine it gets about a hundred stamps in). The
    call is made to last at least 0.2 s (its size doubles until it does), and a miss is tried
    twice more, so a moment of starvation on a busy machine cannot fail it."""
    while True:
        kernel = make_kernel(n)
        t = time.monotonic()
        kernel()
        if time.monotonic() - t >= 0.2 or n >= 4096:
            break
        n *= 2
    for _ in range(3):
        t0, t1, stamps = python_progress_during(make_kernel(n))
        quarter = (t1 - t0) / 4
        middle = [s for s in stamps if t0 + quarter < s < t1 - quarter]
        if middle:
            return
    pytest.fail("no Python progress in the middle of a {:.2f} s call: the GIL was held".format(
        t1 - t0))
