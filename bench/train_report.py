"""Tables, verdicts and the BENCHMARKS.md section of bench/train_compare.py (which runs
everything; this module only formats what it measured).

A result, one per (model, thread count), is a dict
    {"model": name, "label": "4 layers, 4 heads, ...", "threads": N, "attn": run,
     "torch": {contender: {"best": run, "tried": [run, ...]}}}
and a run is train_compare.py's record of one child: "figures" (the parsed `done:` line plus
"evals", {step: (train, val)}, or None when it failed), "peak_rss_mib", "layout", "kind"
("probe" or "full"), "iters", "skipped"/"error".
"""
import shlex

SPEEDUP_TARGET = 1.3  # attn at least this much faster than PyTorch's best configuration
CONTENDER_NAMES = {"eager": "eager", "compile": "torch.compile"}


def fnum(x, spec):
    return "-" if x is None else format(x, spec)


def ms_of(run):
    f = run and run.get("figures")
    return f["ms_per_iter"] if f and f["ms_per_iter"] > 0 else None


def best_torch(result):
    """(contender, run) of the fastest PyTorch full run of a result, or (None, None)."""
    best = (None, None)
    for name, c in result["torch"].items():
        ms = ms_of(c.get("best"))
        if ms is not None and (best[1] is None or ms < ms_of(best[1])):
            best = (name, c["best"])
    return best


def curve_agreement(a, t):
    """How the evaluation lines of two runs agree, as the 4 decimals both programs print:
    (lines compared, lines equal, largest difference), or None without common lines."""
    fa, ft = a and a.get("figures"), t and t.get("figures")
    if not fa or not ft or not fa.get("evals") or not ft.get("evals"):
        return None
    common = sorted(set(fa["evals"]) & set(ft["evals"]))
    if not common:
        return None
    equal, gap = 0, 0.0
    for s in common:
        diffs = [abs(round(fa["evals"][s][i], 4) - round(ft["evals"][s][i], 4)) for i in (0, 1)]
        equal += max(diffs) < 5e-5
        gap = max(gap, *diffs)
    return len(common), equal, gap


def agreement_text(agree):
    if agree is None:
        return "-"
    n, equal, gap = agree
    return "all %d equal" % n if equal == n else "%d/%d equal (max diff %.4f)" % (equal, n, gap)


def cell_ms(run):
    if run is None:
        return "-"
    if run.get("skipped"):
        return "skipped"
    ms = ms_of(run)
    return "failed" if ms is None else "%.2f" % ms


# ---- tables ------------------------------------------------------------------------------------
def main_head(contenders):
    head = ["model", "threads", "attn ms/iter"]
    for c in contenders:
        head += ["%s ms/iter (layout)" % CONTENDER_NAMES[c]]
    head += ["best PyTorch / attn", "attn val loss"]
    for c in contenders:
        head += ["%s val loss" % CONTENDER_NAMES[c], "%s eval lines vs attn" % CONTENDER_NAMES[c]]
    head += ["attn peak MiB"] + ["%s peak MiB" % CONTENDER_NAMES[c] for c in contenders]
    return head


def main_rows(results, contenders):
    rows = []
    for r in results:
        a = r["attn"]
        runs = [r["torch"].get(c, {}).get("best") for c in contenders]
        name, best = best_torch(r)
        ratio = ms_of(best) / ms_of(a) if best and ms_of(a) else None
        row = [r["model"], str(r["threads"]), cell_ms(a)]
        for t in runs:
            row.append(cell_ms(t) + (" (%s)" % t["layout"] if t and ms_of(t) else ""))
        row.append(fnum(ratio, ".2f") + ("x (%s)" % CONTENDER_NAMES[name] if ratio else ""))
        row.append(fnum(a and a["figures"] and a["figures"]["val_loss"], ".4f"))
        for t in runs:
            row.append(fnum(t and t.get("figures") and t["figures"]["val_loss"], ".4f"))
            row.append(agreement_text(curve_agreement(a, t)))
        row.append(fnum(a and a.get("peak_rss_mib"), ".1f"))
        row += [fnum(t and t.get("peak_rss_mib"), ".1f") for t in runs]
        rows.append(row)
    return rows


LAYOUT_HEAD = ["model", "threads", "contender", "layout (intra-op x BLAS)", "run", "steps",
               "ms/iter", "BLAS threads at the end"]


def run_kind(t):
    """probe, full, or full (round K of R) when there were several rounds."""
    kind = t.get("kind", "full")
    return "%s (round %d of %d)" % (kind, t["round"], t["rounds"]) if t.get("rounds", 1) > 1 \
        else kind


def layout_rows(results):
    """Every PyTorch layout tried where there was a choice (the search) and every round of
    every contender where there were several, best first."""
    rows = []
    for r in results:
        a = r.get("attn") or {}
        rounds = a.get("all_rounds") or []
        if len(rounds) > 1:
            for t in sorted(rounds, key=lambda t: ms_of(t) or float("inf")):
                rows.append([r["model"], str(r["threads"]), "attn", "%d threads" % r["threads"],
                             run_kind(t), str(t.get("iters", "-")), cell_ms(t), "-"])
        for c, entry in r["torch"].items():
            tried = entry.get("tried") or []
            if len(tried) < 2:
                continue
            for t in sorted(tried, key=lambda t: ms_of(t) or float("inf")):
                rows.append([r["model"], str(r["threads"]), CONTENDER_NAMES[c], t["layout"],
                             run_kind(t), str(t.get("iters", "-")), cell_ms(t),
                             str(t.get("blas_threads_at_end", "-"))])
    return rows


def text_table(head, rows):
    widths = [max(len(head[i]), *(len(r[i]) for r in rows)) for i in range(len(head))]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def md_table(head, rows):
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


# ---- verdicts ----------------------------------------------------------------------------------
def verdicts(results):
    """One line per (model, threads) and the overall line against SPEEDUP_TARGET: attn at least
    that much faster than the fastest PyTorch configuration (contender and thread layout) at
    every thread count of both models, as train_compare.py defines them (no shape flags)."""
    out, ok_all, models = [], True, []
    for r in results:
        if r["model"] not in models:
            models.append(r["model"])
        name, best = best_torch(r)
        am = ms_of(r["attn"])
        if best is None or am is None:
            ok_all = False
            out.append("%s, %d thread(s): no ratio (a run failed or was skipped)" %
                       (r["model"], r["threads"]))
            continue
        ratio = ms_of(best) / am
        ok_all &= ratio >= SPEEDUP_TARGET
        out.append("%s, %d thread(s): best PyTorch (%s, %s) %.2f ms/iter, attn %.2f: %.2fx %s "
                   "%.1fx: %s" % (r["model"], r["threads"], CONTENDER_NAMES[name],
                                  best["layout"], ms_of(best), am, ratio,
                                  ">=" if ratio >= SPEEDUP_TARGET else "<", SPEEDUP_TARGET,
                                  "met" if ratio >= SPEEDUP_TARGET else "missed"))
    both = len(models) >= 2 and all(r.get("preset", True) for r in results)
    out.append("**Target (attn at least %.1fx faster than the best PyTorch configuration on both "
               "models): %s**%s" % (SPEEDUP_TARGET,
                                    ("MET" if ok_all else "MISSED") if both else "not decided",
                                    "" if both else " (only %s was run, or shape flags changed "
                                    "the models)" % ", ".join(models)))
    return out


def generation_rows(gen):
    rows = []
    for g in gen:
        f = g["figures"]
        rows.append([str(g["threads"]), g["cache"], str(f["tokens"]) if f else "-",
                     fnum(f and f["ms"], ".1f"), fnum(f and f["tokens_per_s"], ".1f"),
                     "%d/%d" % (g["ok"], g["runs"])])
    return rows


GEN_HEAD = ["threads", "cache", "tokens", "ms (median)", "tokens/s (median)", "runs"]


def generation_summary(gen):
    out = []
    by = {(g["threads"], g["cache"]): g["figures"] for g in gen}
    for n in sorted({g["threads"] for g in gen}):
        on, off = by.get((n, "on")), by.get((n, "off"))
        if on and off and off["tokens_per_s"] > 0:
            out.append("threads %d: KV cache speeds generation up %.2fx (%.1f vs %.1f tokens/s)"
                       % (n, on["tokens_per_s"] / off["tokens_per_s"], on["tokens_per_s"],
                          off["tokens_per_s"]))
    return out


# ---- markdown ----------------------------------------------------------------------------------
def markdown(info, results, contenders, commands, gen=(), gen_commands=(), gen_tokens=0):
    m = info["machine"]
    tv = info["torch"]["version"] or "unknown"
    lines = ["## Training against PyTorch %s (%s)" %
             (tv, ", ".join(CONTENDER_NAMES[c] for c in contenders) or "attn only"), ""]
    lines.append(
        "Measured %s on %s (%s CPU(s)%s), PyTorch %s (%s, BLAS: %s), attn at git %s; load "
        "average at the start %s. `bench/train_torch.py` trains the same model from the same "
        "weights on the same batches (attention: %s). Each contender runs at its own fastest "
        "thread layout for N threads: `AxB` is A intra-op threads (`torch.set_num_threads`, "
        "OpenMP) and B BLAS threads (`--blas-threads`: %s), with OMP_NUM_THREADS=A "
        "OPENBLAS_NUM_THREADS=MKL_NUM_THREADS=B; `passive` adds OMP_WAIT_POLICY=PASSIVE. %s"
        % (info["date"], m.get("model") or "unknown CPU", m.get("cpus"),
           ", %d core(s) per socket x %d socket(s)" % (m["cores_per_socket"], m["sockets"])
           if "cores_per_socket" in m and "sockets" in m else "",
           tv, info["torch_python"], info["torch"]["blas"] or "unknown", info["git"],
           " ".join("%.2f" % x for x in m.get("loadavg", ())) or "unknown",
           "F.scaled_dot_product_attention(is_causal=True)" if tv[:1] not in ("", "1")
           else "hand-written softmax, 1.13 has no SDPA",
           "MKL's per-thread count, same libgomp pool" if info["torch"]["blas"] == "MKL"
           else "OpenBLAS's own pthread pool",
           info["search_note"]))
    lines.append("")
    lines.append(
        "ms/iter is each program's median training-step time (evaluation excluded%s)%s. "
        "Val loss is the last evaluation's; `eval lines vs attn` compares every "
        "`step N: train loss X, val loss Y` line of the run with attn's, as both print them (4 "
        "decimals). Peak MiB is the process's ru_maxrss (PyTorch's includes the interpreter and "
        "torch's libraries). best PyTorch / attn divides the fastest PyTorch configuration's "
        "ms/iter by attn's." %
        ("; torch.compile's first steps, which compile, excluded too: `--skip-steps`. "
         "torch.compile runs in its default mode (inductor, C++ kernels on the CPU; the "
         "optimizer step stays eager)" if "compile" in contenders else "",
         "; with %d rounds (every contender's full run once per round, one after another), "
         "each contender's fastest round" % info["rounds"] if info.get("rounds", 1) > 1 else ""))
    lines.append("")
    seen = []
    for r in results:
        if r["model"] not in seen:
            seen.append(r["model"])
            lines.append("- %s: %s; %d steps, evaluation every %d steps over %d batches" %
                         ((r["model"], r["label"], r["steps"]) + tuple(r["eval"])))
    lines.append("")
    head = main_head(contenders)
    lines.append(md_table(head, main_rows(results, contenders)))
    lines.append("")
    if layout_rows(results):
        lines.append("Every run (the search: a `probe` is the full run's command with "
                     "--max-iters K --eval-interval K --eval-iters 1, and only picks the layout; "
                     "rounds: the full runs, repeated):")
        lines.append("")
        lines.append(md_table(LAYOUT_HEAD, layout_rows(results)))
        lines.append("")
    for v in verdicts(results):
        lines.append("- " + v)
    lines.append("")
    lines.append("Commands (from the repository root; the first runs all the others):")
    lines.append("")
    lines.append("```")
    lines.append("/usr/bin/python3 " + " ".join(shlex.quote(a) for a in info["argv"]))
    lines.extend(commands)
    lines.append("```")
    if gen:
        lines += ["", "#### Generation (attn generate, %d new tokens)" % gen_tokens, "",
                  "Median of the runs; tokens/s as attn generate reports it.", "",
                  md_table(GEN_HEAD, generation_rows(gen)), ""]
        lines += ["- " + x for x in generation_summary(gen)] + ["", "```"]
        lines.extend(gen_commands)
        lines.append("```")
    return "\n".join(lines) + "\n"
