#!/usr/bin/env python3
"""The library's layering, checked from its #include lines: every file of src/ and include/attn/
belongs to one component, and a component may include only the components below it (LAYERS).
An include of a component above, or beside, is an error naming the file, the line and both
components. The same graph is the link graph of the CMake targets (src/*/CMakeLists.txt), so a
program that needs tensors links neither cairo nor MPI.

    scripts/check_layers.py            check; exit 1 on a violation
    scripts/check_layers.py --graph    print what each component includes
    scripts/check_layers.py --known    list the known exceptions (KNOWN) and what each waits for

Run by scripts/test.sh before the build; tests/python/test_check_layers.py checks that it fails
on an upward include.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What each component may include besides itself. The core (common .. ops) is one CMake target,
# attn_core; within it the order still holds, except that the tensor's methods (x.sum(),
# x.matmul(y)) are the ops' own API, so tensor and autograd may include the ops' public header.
# backend/cpu holds kernels on raw pointers: it sees no Tensor. The GPU side of an op
# (backend/cuda, backend/no_gpu) implements what ops/ declares for it, so it sees the ops.
# Above the core nothing reaches the backends: modules, optimizers and the distributed code call
# ops only.
CORE = ["common", "device", "tensor", "autograd", "ops"]
LAYERS = {
    "common": [],
    "backend": ["common", "device"],  # what every backend shares (src/backend/*.h)
    "backend/cpu": ["common", "backend"],
    "device": ["common", "backend"],
    "tensor": ["common", "device", "backend", "backend/cpu", "autograd", "ops"],
    "autograd": ["common", "device", "tensor", "ops"],
    "ops": ["common", "device", "tensor", "autograd", "backend", "backend/cpu"],
    "backend/cuda": ["common", "device", "tensor", "autograd", "ops", "backend"],
    "backend/no_gpu": ["common", "device", "tensor", "autograd", "ops", "backend"],
    "io": CORE,
    "nn": CORE + ["io"],
    "optim": CORE + ["nn"],
    "data": CORE + ["io"],
    "plot": CORE + ["io"],
    "distributed": CORE + ["io", "nn", "optim"],
    "train": CORE + ["io", "nn", "optim", "data", "plot", "distributed"],
}

# Includes against the layering that are known and not yet mended, each with what it waits for.
# The check fails on any other; an entry that no longer matches fails too, so the list shrinks.
KNOWN = {}

# The public headers' components.
PUBLIC = {
    "common.h": "common", "half.h": "common", "device.h": "device", "tensor.h": "tensor",
    "random.h": "tensor", "print.h": "tensor", "autograd.h": "autograd", "ops.h": "ops",
    "attention.h": "ops", "flex.h": "ops", "io.h": "io", "torch_format.h": "io", "nn.h": "nn", "gpt.h": "nn",
    "hf_gpt2.h": "nn", "decoder.h": "nn", "hf_decoder.h": "nn", "optim.h": "optim", "lr_scheduler.h": "optim", "data.h": "data",
    "bpe.h": "data", "tokenizer.h": "data", "chat_template.h": "data", "plot.h": "plot", "distributed.h": "distributed", "train.h": "train",
    "kv_cache.h": "nn", "mxfp4.h": "ops",
    "attn.h": None,  # the umbrella header: for programs, never included by the library
}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def component_of_source(rel):
    """The component of a path under src/ ('src/backend/cpu/gemm.cpp' -> 'backend/cpu')."""
    parts = rel.split("/")[1:]
    if parts[0] == "backend":
        return "backend" if len(parts) == 2 else "backend/" + parts[1]
    return parts[0]


def component_of(path):
    rel = os.path.relpath(path, ROOT)
    if rel.startswith("include/attn/"):
        return PUBLIC.get(os.path.basename(rel), "?")
    return component_of_source(rel)


def files():
    for top in ("src", os.path.join("include", "attn")):
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            for name in sorted(names):
                if name.endswith((".h", ".cpp", ".inc", ".cu", ".cuh")):
                    yield os.path.join(dirpath, name)


def target_of(path, quote, name):
    """The component an include names, or None for a system or third-party header."""
    if quote == '"' and name.startswith("attn/") and not os.path.exists(
            os.path.join(os.path.dirname(path), name)):
        quote = "<"  # found through include/
    if quote == "<":
        if name.startswith("attn/"):
            base = name[len("attn/"):]
            if base not in PUBLIC:
                return "?"
            return PUBLIC[base] if PUBLIC[base] is not None else "umbrella"
        return None
    resolved = os.path.normpath(os.path.join(os.path.dirname(path), name))
    if not os.path.exists(resolved):
        return "?"
    return component_of(resolved)


def check(paths):
    errors, graph, known_seen = [], {}, set()
    for path in paths:
        comp = component_of(path)
        rel = os.path.relpath(path, ROOT)
        if comp is None:
            continue  # the umbrella header includes every component
        if comp not in LAYERS:
            errors.append("{}: file of no known component '{}' (add it to LAYERS in {})".format(
                rel, comp, os.path.relpath(__file__, ROOT)))
            continue
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = target_of(path, m.group(1), m.group(2))
                if target is None or target == comp:
                    continue
                graph.setdefault(comp, set()).add(target)
                if (rel, m.group(2)) in KNOWN:
                    known_seen.add((rel, m.group(2)))
                    continue
                if target not in LAYERS[comp]:
                    why = ("includes the umbrella header" if target == "umbrella" else
                           "includes an unknown header" if target == "?" else
                           "includes {} ({} may include {})".format(
                               target, comp, ", ".join(LAYERS[comp]) or "nothing else"))
                    errors.append("{}:{}: {} {}: {}".format(rel, lineno, comp, why,
                                                            line.strip()))
    for rel, name in sorted(set(KNOWN) - known_seen):
        errors.append("{}: no longer includes {}: remove it from KNOWN".format(rel, name))
    return errors, graph


def main(argv):
    errors, graph = check(files())
    if "--known" in argv:
        for (rel, name), why in sorted(KNOWN.items()):
            print("{} includes {}: waits for {}".format(rel, name, why))
    if "--graph" in argv:
        for comp in sorted(graph):
            print("{:15} -> {}".format(comp, " ".join(sorted(graph[comp]))))
    for e in errors:
        print("check_layers: " + e, file=sys.stderr)
    if errors:
        print("check_layers: {} include(s) against the layering (docs/developer.md)".format(
            len(errors)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
