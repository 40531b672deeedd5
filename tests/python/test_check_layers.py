"""scripts/check_layers.py, the layering of the library checked on its #include lines: it passes on
the tree, and it fails on an include of a layer above (or a private header of the backends from a
module), on a file of no known component, and on a known exception that is gone."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load():
    spec = importlib.util.spec_from_file_location(
        "check_layers", os.path.join(ROOT, "scripts", "check_layers.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def tree(tmp_path, files):
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return [str(tmp_path / rel) for rel in files]


def test_the_tree_keeps_its_layering():
    mod = load()
    errors, graph = mod.check(mod.files())
    assert errors == []
    assert "nn" in graph and "backend/cpu" not in graph.get("optim", set())


def test_an_upward_include_fails(tmp_path, monkeypatch):
    mod = load()
    monkeypatch.setattr(mod, "ROOT", str(tmp_path))
    monkeypatch.setattr(mod, "KNOWN", {})
    paths = tree(tmp_path, {
        "src/tensor/a.cpp": '#include "../nn/b.h"\n#include <attn/plot.h>\n',
        "src/nn/b.h": "#pragma once\n",
        "src/optim/c.cpp": '#include "../backend/cpu/k.h"\n#include "../ops/d.h"\n',
        "src/backend/cpu/k.h": '#include "../../tensor/e.h"\n',
        "src/tensor/e.h": "#pragma once\n",
        "src/ops/d.h": "#include <attn/tensor.h>\n",
        "src/gadgets/f.cpp": "#include <vector>\n",
    })
    errors, _ = mod.check(paths)
    text = "\n".join(errors)
    assert "src/tensor/a.cpp:1: tensor includes nn" in text
    assert "src/tensor/a.cpp:2: tensor includes plot" in text
    assert "src/optim/c.cpp:1: optim includes backend/cpu" in text
    assert "src/backend/cpu/k.h:1: backend/cpu includes tensor" in text
    assert "src/gadgets/f.cpp: file of no known component 'gadgets'" in text
    assert "ops/d.h" not in text  # optim may include ops; ops may include tensor
    assert len(errors) == 5, text


def test_a_known_exception_that_is_gone_fails(tmp_path, monkeypatch):
    mod = load()
    monkeypatch.setattr(mod, "ROOT", str(tmp_path))
    monkeypatch.setattr(mod, "KNOWN", {("src/nn/x.cpp", "../backend/cpu/k.h"): "an op"})
    paths = tree(tmp_path, {"src/nn/x.cpp": "#include <vector>\n"})
    errors, _ = mod.check(paths)
    assert errors == ["src/nn/x.cpp: no longer includes ../backend/cpu/k.h: remove it from KNOWN"]
