#!/usr/bin/python3
"""PyTorch reference for `attn train` (torch 1.13 and 2.x): the same character-level GPT, data,
optimizer, learning-rate schedule and loop, with the same command-line flags and the same final
line.

    /usr/bin/python3 bench/train_torch.py --threads 1 --data ../shared/data/tinyshakespeare.txt
    .venv-bench/bin/python bench/train_torch.py --threads 1 --data ../shared/data/tinyshakespeare.txt
    .venv-bench/bin/python bench/train_torch.py --threads 1 --compile --data ...
    (.venv-bench holds PyPI's torch 2.15: scripts/bench_setup.sh --print gives its python)

Attention (--attention): `auto` (default) uses F.scaled_dot_product_attention(q, k, v,
is_causal=True) where torch has it (2.x) and --dropout is 0, as a 2.x user writes it, and the
hand-written softmax(q k^T / sqrt(hd) + causal mask) @ v otherwise (torch 1.13, or dropout > 0,
whose draws SDPA would make differently); `manual` forces the hand-written path, `sdpa` requires
SDPA. Both compute the same function, so the losses agree with attn's either way.

--compile (torch 2.x) trains torch.compile(model) in the default mode (--compile-mode changes it;
inductor on the CPU, the optimizer step stays eager). Compilation happens in the first timed
steps (and in the first evaluation, which is never timed): the median leaves out the first
--skip-steps timed steps (default 10 with --compile, 0 without), and the `compile:` line and the
JSON give the time those steps took.

Model (pre-norm GPT; no biases by default, --bias adds them to Linear layers and LayerNorms):
    x = wte(idx) + wpe(0..T-1); dropout
    n_layer times:  x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))
        attn: one fused projection C -> 3C giving q, k, v (in that order), heads of C / n_head,
              softmax(q k^T / sqrt(hd) with -inf above the diagonal), dropout, @ v, Linear(C, C)
        mlp:  Linear(C, 4C), exact GELU, Linear(4C, C), dropout
    logits = ln_f(x) @ wte.weight^T   (output layer tied to the token embedding, no bias)
Init: every Linear/Embedding weight N(0, 0.02), biases 0, LayerNorm 1/0, and the two residual
projections (attention output, second MLP Linear) N(0, 0.02 / sqrt(2 n_layer)); the draws come
from the global generator (torch.manual_seed(seed)) in parameter registration order, after the
modules' own default initialisation. Parameter names and every random draw (weights, then
batches) are those of attn's GPT and `attn train`, so with the same flags both programs start
from the same weights, see the same batches and print the same losses (checked on this machine
with 1 thread: every evaluation line of 2000 steps identical to 4 decimals for seeds 1337, 1, 2
and 3 with --bias and 1337 without, except one last-digit difference); attn's model.safetensors
loads into GPT with load_state_dict.

Data: vocabulary = sorted(set(text)), first 90% of the characters train, the rest validation;
a batch is `ix = torch.randint(len(split) - block_size, (batch_size,))` and x = data[i:i+T],
y = data[i+1:i+T+1], from the same global generator.

Optimizer: torch.optim.AdamW, matrices/embeddings decay (weight_decay), other parameters not,
betas (0.9, beta2), eps 1e-8. Learning rate: linear warmup lr*(it+1)/(warmup+1) for
it < warmup_iters, cosine from lr to min_lr until lr_decay_iters, min_lr after.

Loop, for it = 0 .. max_iters:
    if it % eval_interval == 0 or it == max_iters: mean loss of eval_iters batches of train and
        of val (eval mode, no_grad), printed as `step {it}: train loss X, val loss Y`
    if it == max_iters: stop
    timed step: set lr, fetch a batch, forward, backward, clip_grad_norm_ (if grad_clip > 0),
        optimizer step, zero_grad(set_to_none=True)

Output: ms_per_iter is the median wall time (time.perf_counter) of the timed steps (evaluation
and the first --skip-steps steps excluded), tokens_per_s = batch_size * block_size /
(ms_per_iter / 1000), peak memory is getrusage(RUSAGE_SELF).ru_maxrss.

Threads: --threads sizes torch's intra-op pool (torch.set_num_threads: OpenMP) and --blas-threads
(default: the same) the threads of the BLAS behind torch's matmuls, which depends on the build
(torch.__config__.show() says which; the first line printed gives both counts):
  - Debian's torch 1.13: OpenBLAS with its own pthread pool, which set_num_threads does not reach;
    --blas-threads calls openblas_set_num_threads (the parent should also set
    OPENBLAS_NUM_THREADS).
  - PyPI's torch 2.x: MKL threaded by the same OpenMP runtime (libgomp) as torch's kernels.
    torch.set_num_threads also sets MKL's count for the calling thread
    (mkl_set_num_threads_local), which overrides MKL_NUM_THREADS, so --blas-threads calls
    MKL_Set_Num_Threads_Local (exported by libtorch_cpu) afterwards. Training runs on the main
    thread (CPU autograd included), the one that setting covers.
The last two lines are
    peak_rss_mib=M
    done: iters=N ms_per_iter=X train_loss=Y val_loss=Z tokens_per_s=W
where train_loss / val_loss are the evaluation at the last step. --json PATH writes the same
figures (plus the evaluation history, per-step timing statistics and the configuration).
"""
import argparse
import ctypes
import json
import math
import os
import resource
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# ---- command line ------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=12)
    p.add_argument("--max-iters", type=int, default=2000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup-iters", type=int, default=100)
    p.add_argument("--lr-decay-iters", type=int, default=2000)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--beta2", type=float, default=0.99)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--eval-interval", type=int, default=250)
    p.add_argument("--eval-iters", type=int, default=200)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=0, help="0: all cores (os.cpu_count())")
    p.add_argument("--data", default=os.path.join("..", "shared", "data", "tinyshakespeare.txt"))
    p.add_argument("--bias", dest="bias", action="store_true", default=False,
                   help="biases in Linear layers and LayerNorms")
    p.add_argument("--no-bias", dest="bias", action="store_false",
                   help="no biases (default, as nanoGPT's train.py and attn train)")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    p.add_argument("--blas-threads", type=int, default=None,
                   help="threads of the BLAS behind torch's matmuls: OpenBLAS's own pool "
                        "(Debian's 1.13) or MKL's (PyPI's 2.x) (default: --threads; "
                        "PyTorch-only, attn has one pool)")
    p.add_argument("--attention", choices=("auto", "sdpa", "manual"), default="auto",
                   help="auto (default): F.scaled_dot_product_attention(is_causal=True) where "
                        "torch has it and --dropout is 0, else the hand-written softmax")
    p.add_argument("--compile", action="store_true",
                   help="train torch.compile(model) (torch 2.x)")
    p.add_argument("--compile-mode", default="default",
                   choices=("default", "reduce-overhead", "max-autotune",
                            "max-autotune-no-cudagraphs"),
                   help="torch.compile's mode with --compile (default: default)")
    p.add_argument("--skip-steps", type=int, default=None,
                   help="timed steps left out of the median at the start (default: 10 with "
                        "--compile, where they compile; 0 otherwise)")
    a = p.parse_args(argv)

    def need(cond, what):
        if not cond:
            p.error(what)

    for name in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "eval_interval",
                 "eval_iters"):
        need(getattr(a, name) >= 1, "--%s must be >= 1" % name.replace("_", "-"))
    need(a.n_embd % a.n_head == 0, "--n-embd must be divisible by --n-head")
    need(a.max_iters >= 1, "--max-iters must be >= 1")
    need(a.warmup_iters >= 0, "--warmup-iters must be >= 0")
    need(0.0 <= a.dropout < 1.0, "--dropout must be in [0, 1)")
    need(a.threads >= 0, "--threads must be >= 0")
    need(a.blas_threads is None or a.blas_threads >= 1, "--blas-threads must be >= 1")
    has_sdpa = hasattr(F, "scaled_dot_product_attention")
    need(a.attention != "sdpa" or has_sdpa,
         "--attention sdpa: torch %s has no F.scaled_dot_product_attention" % torch.__version__)
    need(a.attention != "sdpa" or a.dropout == 0.0,
         "--attention sdpa needs --dropout 0 (SDPA's dropout draws differ from attn's)")
    a.sdpa = a.attention == "sdpa" or (a.attention == "auto" and has_sdpa and a.dropout == 0.0)
    need(not a.compile or hasattr(torch, "compile"),
         "--compile: torch %s has no torch.compile (it needs torch 2.x)" % torch.__version__)
    if a.skip_steps is None:
        a.skip_steps = 10 if a.compile else 0
    need(a.skip_steps >= 0, "--skip-steps must be >= 0")
    need(a.skip_steps < a.max_iters,
         "--skip-steps (%d) must be below --max-iters (%d): some steps must be timed"
         % (a.skip_steps, a.max_iters))
    return a


# ---- model -------------------------------------------------------------------------------------
class LayerNorm(nn.Module):
    """LayerNorm whose bias can be switched off (torch 1.13's nn.LayerNorm cannot)."""

    def __init__(self, n, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    """Causal multi-head self-attention with one fused input projection (q, k, v stacked in
    in_proj_weight, 3C x C): F.scaled_dot_product_attention(is_causal=True) when cfg.sdpa, else
    written out by hand (torch 1.13 has no scaled_dot_product_attention).
    Parameters, their names and the random draws at construction are those of
    nn.MultiheadAttention(C, n_head, bias=bias, batch_first=True): out_proj's Linear draws first,
    then xavier_uniform_ fills in_proj_weight (GPT.__init__ redraws both afterwards)."""

    def __init__(self, cfg):
        super().__init__()
        C = cfg.n_embd
        self.n_head = cfg.n_head
        self.sdpa = cfg.sdpa
        self.in_proj_weight = nn.Parameter(torch.empty(3 * C, C))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * C)) if cfg.bias else None
        self.out_proj = nn.Linear(C, C, bias=cfg.bias)
        nn.init.xavier_uniform_(self.in_proj_weight)
        self.att_drop = nn.Dropout(cfg.dropout)
        T = cfg.block_size
        self.register_buffer("future", torch.ones(T, T, dtype=torch.bool).triu(1),
                             persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        H = self.n_head
        hd = C // H
        q, k, v = F.linear(x, self.in_proj_weight, self.in_proj_bias).split(C, dim=2)
        q = q.view(B, T, H, hd).transpose(1, 2)  # (B, H, T, hd)
        k = k.view(B, T, H, hd).transpose(1, 2)
        v = v.view(B, T, H, hd).transpose(1, 2)
        if self.sdpa:  # dropout is 0 here (parse_args)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.out_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        scores = scores.masked_fill(self.future[:T, :T], float("-inf"))
        weights = self.att_drop(F.softmax(scores, dim=-1))
        y = (weights @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.out_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.gelu = nn.GELU()  # exact (erf) form
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = LayerNorm(cfg.n_embd, cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = LayerNorm(cfg.n_embd, cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Parameter names follow attn's GPT state_dict (wte.weight, h.{i}.attn.in_proj_weight,
    h.{i}.mlp.c_fc.weight, ln_f.bias, ...), so attn's model.safetensors loads into it. The output
    layer is the token table itself (F.linear with wte.weight): no module of its own, no draws.

    Random draws, all from the global generator: first the default initialisation of every
    module as it is constructed (nn.Embedding's normal_, nn.Linear's kaiming_uniform_ and bias
    uniform_, the attention's xavier_uniform_), then nanoGPT's N(0, 0.02) redraw of every matrix
    in registration order. attn's GPT draws the same values in the same order, so with the same
    seed both programs start from the same weights and draw the same batches."""

    def __init__(self, cfg, vocab_size):
        super().__init__()
        self.block_size = cfg.block_size
        self.wte = nn.Embedding(vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = LayerNorm(cfg.n_embd, cfg.bias)

        residual_std = 0.02 / math.sqrt(2 * cfg.n_layer)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if isinstance(self.get_submodule(name.rpartition(".")[0]), LayerNorm):
                    continue  # ones / zeros already
                if p.dim() >= 2:
                    residual = name.endswith("attn.out_proj.weight") or \
                        name.endswith("mlp.c_proj.weight")
                    p.normal_(0.0, residual_std if residual else 0.02)
                else:
                    p.zero_()  # Linear and input-projection biases

    def forward(self, idx, targets=None):
        B, T = idx.shape
        if T > self.block_size:
            raise ValueError("sequence length %d exceeds block_size %d" % (T, self.block_size))
        pos = torch.arange(T, dtype=torch.long)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied output layer, no bias
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))
        return logits, loss


# ---- data --------------------------------------------------------------------------------------
def load_data(path):
    with open(path, "r", encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    # Code points -> vocabulary indices without a Python object per character.
    points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    table = np.array([ord(c) for c in chars], dtype=np.uint32)
    data = torch.from_numpy(np.searchsorted(table, points).astype(np.int64))
    n = int(0.9 * len(data))
    return chars, data[:n], data[n:]


def get_batch(data, block_size, batch_size):
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix.tolist()])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix.tolist()])
    return x, y


# ---- training ----------------------------------------------------------------------------------
def lr_at(it, a):
    if it < a.warmup_iters:
        return a.lr * (it + 1) / (a.warmup_iters + 1)
    if it >= a.lr_decay_iters:
        return a.min_lr
    ratio = (it - a.warmup_iters) / (a.lr_decay_iters - a.warmup_iters)
    return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)


@torch.no_grad()
def estimate_loss(model, splits, a):
    model.eval()
    out = {}
    for name, data in splits:
        losses = torch.zeros(a.eval_iters)  # float32 losses and float32 mean, as nanoGPT
        for k in range(a.eval_iters):
            x, y = get_batch(data, a.block_size, a.batch_size)
            losses[k] = model(x, y)[1].item()
        out[name] = losses.mean().item()
    model.train()
    return out


def _loaded_libraries(*needles):
    """Paths of the shared libraries mapped into this process whose names contain a needle."""
    paths = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                name = os.path.basename(path)
                if any(k in name for k in needles) and path not in paths:
                    paths.append(path)
    except OSError:
        pass
    return paths


def blas_library():
    """(name, set_threads, get_threads) of the BLAS behind torch's matmuls, or Nones.
    OpenBLAS (Debian's torch 1.13): a pthread pool of its own, one thread per core unless told
    otherwise; torch.set_num_threads does not reach it.
    MKL (PyPI's torch 2.x, linked into libtorch_cpu, threaded by the same libgomp as torch's
    kernels): torch.set_num_threads calls mkl_set_num_threads_local for the calling thread;
    calling it again afterwards sets MKL apart from the OpenMP pool."""
    if torch.backends.mkl.is_available():
        # Ask MKL first: Debian's numpy maps an OpenBLAS too, which torch 2.x does not call.
        for path in _loaded_libraries("mkl", "torch_cpu"):
            try:
                lib = ctypes.CDLL(path)
                # The C entry points (mkl_service.h maps mkl_set_num_threads_local to them):
                # the lower-case symbols are the Fortran ones, which take a pointer.
                return "MKL", lib.MKL_Set_Num_Threads_Local, lib.MKL_Get_Max_Threads
            except (OSError, AttributeError):
                continue
    for path in _loaded_libraries("openblas") + ["libopenblas.so.0"]:
        try:
            lib = ctypes.CDLL(path)
            return "OpenBLAS", lib.openblas_set_num_threads, lib.openblas_get_num_threads
        except (OSError, AttributeError):
            continue
    return None, None, None


def set_blas_threads(n):
    """Gives the BLAS n threads (call after torch.set_num_threads, which resets MKL's count);
    returns (its name, the count it reports), or (None, None) when none is found."""
    name, set_threads, get_threads = blas_library()
    if name is None:
        return None, None
    set_threads(ctypes.c_int(n))
    return name, int(get_threads())


def blas_threads_now():
    """The BLAS's thread count as it reports it now (None when no BLAS is found)."""
    name, _, get_threads = blas_library()
    return int(get_threads()) if name else None


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def main(argv=None):
    a = parse_args(argv)
    threads = a.threads if a.threads > 0 else (os.cpu_count() or 1)
    torch.set_num_threads(threads)
    # torch sets each thread's pools up lazily, at its first parallel region or get_num_threads
    # (at::init_num_threads, which resets MKL's count to --threads): here, before the BLAS's.
    torch.get_num_threads()
    blas_name, blas_threads = set_blas_threads(a.blas_threads or threads)
    rss_before = peak_rss_mib()

    chars, train_data, val_data = load_data(a.data)
    for name, d in (("train", train_data), ("val", val_data)):
        if len(d) <= a.block_size:
            sys.exit("train_torch.py: error: %s split of %s has %d tokens, need more than "
                     "block_size %d" % (name, a.data, len(d), a.block_size))

    torch.manual_seed(a.seed)
    model = GPT(a, len(chars))
    model.train()
    step_model = torch.compile(model, mode=a.compile_mode) if a.compile else model
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, a.beta2), eps=1e-8)
    print("torch %s, %d threads (%s %s), attention %s, %s, vocab %d, train %d / val %d tokens, "
          "%d parameters (%.2fM)" % (torch.__version__, threads, blas_name or "BLAS", blas_threads,
                                     "sdpa" if a.sdpa else "manual",
                                     "torch.compile mode=%s" % a.compile_mode if a.compile
                                     else "eager", len(chars), len(train_data), len(val_data),
                                     n_params, n_params / 1e6),
          flush=True)

    splits = (("train", train_data), ("val", val_data))
    step_ms = []
    history = []
    losses = None
    t_start = time.perf_counter()
    for it in range(a.max_iters + 1):
        if it % a.eval_interval == 0 or it == a.max_iters:
            losses = estimate_loss(step_model, splits, a)
            history.append({"iter": it, "train_loss": losses["train"], "val_loss": losses["val"]})
            print("step %d: train loss %.4f, val loss %.4f" % (it, losses["train"], losses["val"]),
                  flush=True)
        if it == a.max_iters:
            break
        t0 = time.perf_counter()
        lr = lr_at(it, a)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = get_batch(train_data, a.block_size, a.batch_size)
        _, loss = step_model(x, y)
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step_ms.append((time.perf_counter() - t0) * 1000.0)
    wall_s = time.perf_counter() - t_start

    skipped, step_ms = step_ms[:a.skip_steps], step_ms[a.skip_steps:]
    if a.compile:
        print("compile: the first %d step(s) took %.1f s (compilation; not in the median)" %
              (len(skipped), sum(skipped) / 1000.0), flush=True)
    print("threads at the end: torch %d, %s %s" % (torch.get_num_threads(), blas_name or "BLAS",
                                                    blas_threads_now()), flush=True)
    ms = statistics.median(step_ms) if step_ms else 0.0
    tok_s = a.batch_size * a.block_size / (ms / 1000.0) if ms > 0 else 0.0
    peak = peak_rss_mib()
    if a.json:
        record = {
            "impl": "torch", "torch_version": torch.__version__, "threads": threads,
            "blas": blas_name, "blas_threads": blas_threads,
            "blas_threads_at_end": blas_threads_now(),
            "attention": "sdpa" if a.sdpa else "manual",
            "compile": a.compile_mode if a.compile else None,
            "skipped_steps_ms": skipped,
            "iters": a.max_iters, "ms_per_iter": ms, "train_loss": losses["train"],
            "val_loss": losses["val"], "tokens_per_s": tok_s, "peak_rss_mib": peak,
            "rss_before_data_mib": rss_before,
            "step_ms": ({"mean": statistics.fmean(step_ms), "min": min(step_ms),
                         "max": max(step_ms)} if step_ms else None),
            "wall_s": wall_s, "n_params": n_params, "vocab_size": len(chars),
            "history": history,
            "config": {k: v for k, v in vars(a).items() if k != "json"},
        }
        with open(a.json, "w") as f:
            json.dump(record, f, indent=2)
            f.write("\n")
    print("peak_rss_mib=%.1f" % peak)
    print("done: iters=%d ms_per_iter=%.2f train_loss=%.4f val_loss=%.4f tokens_per_s=%d" %
          (a.max_iters, ms, losses["train"], losses["val"], int(round(tok_s))), flush=True)


if __name__ == "__main__":
    main()
