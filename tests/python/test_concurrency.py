"""attn from several Python threads at once (docs/threads.md).

Each thread runs attention forward and backward (fused scaled_dot_product_attention with causal
masking, boolean masks, key padding and a window), MultiheadAttention and a small GPT on its own
inputs, and every result must be bitwise the one the same inputs give on a single thread. Bitwise,
not within a tolerance, because nothing but the inputs decides the bits: attn's kernels split work
by the process-wide thread count, never by timing, and keep each element's order of summation
whatever the split (backend/cpu/gemm.h, sdpa_fused_backward.h). The one exception is a parameter
that several threads' backward passes add into (a model shared by the threads): the additions
come in the threads' order, so its gradient is compared with the sum of the one-thread gradients
to float32 rounding (check_shared_module).

Besides attention and the models, one test runs a mix of elementwise ops, comparisons,
reductions, copies, indexing, in-place ops, random fills from its own generator and backward
passes on each thread's own tensors (bitwise the one-thread results too), and one draws from the
shared default generator on every thread (each call a whole run of its stream).

The last tests check that the threads really overlap: while a long kernel runs in one thread
(attention, matmul, a model, and one call of each kind the bindings run without the GIL: a
reduction, a scan, a sort, elementwise ops, an operator, a comparison, an in-place op, a copy, a
random fill), another thread keeps executing Python code, which it can only do if the kernel
released the GIL.
"""
import os
import subprocess
import sys
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


def test_thread_count_is_process_wide_even_when_the_main_threads_openmp_count_changed():
    """Importing PyTorch sets the importing thread's OpenMP count (to 1 on a 2-core machine), and
    OpenMP's count is per thread: attn's count, until set_num_threads, must still be one number
    for every thread, or the main thread and a new one split products differently (other bits
    where the split changes a BLAS's sums). A fresh process, so that set_num_threads was never
    called."""
    code = (
        "import ctypes, threading\n"
        "import attn\n"
        "ctypes.CDLL('libgomp.so.1').omp_set_num_threads(1)\n"
        "seen = []\n"
        "t = threading.Thread(target=lambda: seen.append(attn.get_num_threads()))\n"
        "t.start(); t.join()\n"
        "print(attn.get_num_threads(), seen[0])\n")
    env = dict(os.environ, OMP_NUM_THREADS="3")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["3", "3"], out.stdout


MIXED_ITERATIONS = 200


def mixed_inputs(i):
    g = attn.Generator().manual_seed(500 + i)
    return (randn(g, 48, 80), randn(g, 48, 80), attn.randint(80, (48, 6), generator=g), 600 + i)


def mixed_run(inputs, iterations=MIXED_ITERATIONS):
    """Elementwise ops, comparisons, reductions, copies, indexing, in-place ops (on a tensor this
    thread owns, and through a view of it), random fills from this thread's own Generator and a
    backward pass, every iteration feeding the next through `state`. Returns each iteration's
    small results as one float32 array, and the final state and gradient."""
    x, y, idx, seed = inputs
    g = attn.Generator().manual_seed(seed)
    state = x.clone()
    rows = attn.tensor([0, 5, 9, 47])
    digests = []
    for it in range(iterations):
        noise = attn.empty(48, 80).normal_(0.0, 0.1, generator=g)
        # elementwise and comparisons
        a = (state * 0.5 + y) / (1.0 + it % 3) - noise
        b = attn.where(a > 0, a.exp().clamp(max=4.0), (-a).sqrt().neg())
        c = attn.maximum(b.tanh(), a.sigmoid() - 0.5).pow(2) + (a.abs() + 1).log()
        d = (c >= 0.25) & ~(a < -1.0) | (b == 0)
        e = attn.clamp(c.masked_fill(d, 0.5), -2.0, 2.0).relu().rsqrt() ** 0.5 - 2 ** c.neg()
        # reductions
        vmax, imax = b.max(1)
        top = attn.topk(c, 3, dim=1)
        sorted_c = attn.sort(a[:4], dim=1, descending=True)
        reductions = [b.sum(), a.mean(1), a.var(0), vmax, imax, a.min(), c.amax((0, 1)),
                      e.argmax(1), attn.argmin(a, 0), c.cumsum(1)[:, -1], a[:3].cumprod(1)[:, 5],
                      c.softmax(-1)[:, 0], c.log_softmax(0)[0], d.all(), d.any(), d.sum(),
                      top.values, top.indices, sorted_c.values, c.gather(1, idx), e.mean()]
        # copies, conversions and indexing
        t = a.t().contiguous().reshape(-1)[::97].clone()
        ints = (a * 100).to(attn.int64) * 3 - (b * 10).long()
        picked = attn.cat([state[rows], attn.stack([a[1], b[2]])]).sum(0)
        # in place: on the state, through a view of it, and on a scratch copy
        state.mul_(0.9).add_(c.mean(0, keepdim=True)).sub_(noise)
        state.clamp_(-3.0, 3.0)
        state.masked_fill_(state.abs() < 0.01, 0.0)
        state[:, ::7] = 0.25 * b[:, ::7]
        state[:, 1::7].mul_(0.5).exp_()
        scratch = attn.empty_like(state)
        scratch.copy_(state)
        scratch.abs_().add_(1.0).log_().pow_(2).div_(2.0)
        state += scratch / (1 + it)
        scratch.zero_()
        scratch.fill_(float(it))
        # a graph of this thread's own leaf, backpropagated
        p = x.clone().requires_grad_()
        q = (p * state).tanh() + p.exp().clamp(max=3.0) - p.sigmoid() * y
        loss = (q.softmax(-1) * y).sum() + q.var() + p.pow(2).mean() + q.max(0).values.sum()
        loss.backward()
        digest = reductions + [t, ints, picked, scratch[0, :2], loss, p.grad.sum(0),
                               p.grad.abs().amax(())]
        digests.append(attn.cat([r.float().reshape(-1) for r in digest]))
    return snapshot(attn.stack(digests), state, p.grad)


def test_elementwise_reductions_in_place_and_backward_in_threads_match_one_thread():
    """Every op the bindings run without the GIL, on each thread's own tensors, from N_THREADS
    threads at once: bitwise the one-thread results."""
    inputs = [mixed_inputs(i) for i in range(N_THREADS)]
    expected = [mixed_run(inputs[i]) for i in range(N_THREADS)]
    got = run_threads(lambda i: mixed_run(inputs[i]))
    for i in range(N_THREADS):
        assert_same_bits(got[i], expected[i], "thread {}".format(i))


def test_default_generator_draws_whole_runs_per_call_in_threads():
    """Threads drawing from the shared default generator at once (rand, randn, randint and
    normal_, which run without the GIL): the generator locks itself for each call's draws, so
    every call takes a whole run of the stream. Each kind of call here takes 320 32-bit draws
    (randn and normal_ a multiple of 16 of them), so the stream splits into the same runs
    whatever the order: each call's values are those its kind gives at one run, every run is
    taken by exactly one call, and the generator ends where one thread's calls leave it."""
    calls, n = 24, 320
    kinds = (lambda: attn.rand(n), lambda: attn.randn(n),
             lambda: attn.randint(1000, (n,)).float(), lambda: attn.empty(n).normal_())

    def draw(i):
        return [(k, kinds[k]().numpy().tobytes()) for k in ((i + j) % 4 for j in range(calls))]

    start = attn.get_rng_state()
    runs = calls * N_THREADS
    at_run = [{} for _ in kinds]  # at_run[kind][values] = the run
    for r in range(runs):
        state = attn.get_rng_state()
        for k, make in enumerate(kinds):
            attn.set_rng_state(state)
            at_run[k][make().numpy().tobytes()] = r
    end = attn.get_rng_state()
    attn.set_rng_state(start)
    taken = sorted(at_run[k].get(values, -1) for d in run_threads(draw) for k, values in d)
    assert taken == list(range(runs))
    assert np.array_equal(np.asarray(attn.get_rng_state()), np.asarray(end))


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


def tensor_kernel(op):
    """A kernel of one call op(x, y) on two n x n tensors (made from 2n random numbers, which is
    quicker than n * n of them), for the elementwise ops, reductions, copies and in-place ops
    that release the GIL: on 4096 x 4096 each takes 0.1 to 0.5 s on this machine's two cores."""
    def make(n):
        x = attn.randn(n, 1) + attn.randn(1, n)
        y = attn.randn(n, 1) * attn.randn(1, n)
        return lambda: op(x, y)
    return make


KERNELS = [
    ("matmul", matmul_kernel, 512),
    ("sdpa_forward", sdpa_forward_kernel, 512),
    ("sdpa_backward", sdpa_backward_kernel, 512),
    ("gpt_forward", gpt_forward_kernel, 256),
    # reductions (along dim 0, the slow direction), scans and sorting
    ("sum_dim", tensor_kernel(lambda x, y: x.sum(0)), 2048),
    ("var", tensor_kernel(lambda x, y: attn.var(x, 0)), 2048),
    ("max_dim", tensor_kernel(lambda x, y: x.max(0)), 2048),
    ("cumsum", tensor_kernel(lambda x, y: x.cumsum(0)), 2048),
    ("sort", tensor_kernel(lambda x, y: x[:x.shape[0] // 4].sort(1)), 2048),
    # elementwise: unary, a binary operator, where (and its comparison)
    ("tanh", tensor_kernel(lambda x, y: x.tanh()), 2048),
    ("pow_operator", tensor_kernel(lambda x, y: x ** y), 2048),
    ("where", tensor_kernel(lambda x, y: attn.where(x > 0, x, y)), 2048),
    # in place, copies, random fills
    ("add_inplace", tensor_kernel(lambda x, y: x.add_(y.t())), 2048),
    ("contiguous", tensor_kernel(lambda x, y: x.t().contiguous()), 2048),
    ("randn", tensor_kernel(lambda x, y: attn.randn(*x.shape)), 2048),
]


@pytest.mark.parametrize("make_kernel, n", [k[1:] for k in KERNELS], ids=[k[0] for k in KERNELS])
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
