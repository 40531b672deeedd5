"""The tours, run: every code block after a `<!-- tour: ... -->` marker in the README and in the
docs pages of TOUR_FILES is executed, and what it prints is compared with the output written in
its comments.

The tour is these files read in the order of TOUR_FILES, as one: README.md (its short C++ and
Python examples, step `quickstart`), docs/tour-cpp.md, docs/tour-python.md and docs/gpu.md (a
compile-only CUDA block). A marker in README.md or docs/*.md outside TOUR_FILES is an error, so
that no block goes unexecuted.

Markers (an HTML comment on the line before a fenced block, invisible on GitHub):

    <!-- tour: cpp NAME [compile-only] -->      a ```cpp block
    <!-- tour: python NAME [attn-only] -->      a ```python block

Expected output convention, the same in both languages (`C` is `//` in C++, `#` in Python):

    print(x)          C -> tensor([0, 4, 5])     one printed line, after the code ...
    C -> tensor([[1., 2.],                       ... or on its own line; the comment lines that
    C           [3., 4.]])                       follow and start with C plus four spaces continue
                                                 it (a bare C is an empty line), so that the text
                                                 lines up with the first line as it is printed.

A block must print exactly the lines its comments announce, in order, nothing more.

C++: the blocks, in tour order, are one program: `#include` and `using namespace` lines go to
file scope, the rest of each block into `main()`, the blocks of one file in one `{ }` scope (so
later steps use earlier variables of their file); compile-only blocks become functions that are
compiled and never called. One compile against the build's libattn.a, one run.

Python: the blocks run in order, those of one file in one namespace, in a fresh interpreter, once
with attn and once with PyTorch 1.13 (import lines say `torch` instead of `attn`); both must print
what the comments say. attn-only blocks (attn's own API) run with attn only. PyTorch 1.13 has no
F.scaled_dot_product_attention: the torch run gets the textbook formula under that name.

Finally the C++ steps must print the same numbers as the Python step of the same NAME (each
decimal number of the C++ output appears in the Python output, which PyTorch has checked), and
the tour must cover every mechanism of the seeds, the five tutorial documents attn started from
(REQUIRED_STEPS), in both languages.

The build is found from the attn module on PYTHONPATH (build/python/attn -> build/), or from
$ATTN_BUILD_DIR.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The files of the tour, in tour order (paths relative to the repository root).
TOUR_FILES = ("README.md", "docs/tour-cpp.md", "docs/tour-python.md", "docs/gpu.md")

# One step per mechanism of the seeds (the five tutorial documents attn started from, listed in the
# README); each must be in the tour in both languages.
REQUIRED_STEPS = ("embeddings", "one-word", "simplified", "trainable", "causal", "multihead",
                  "multihead-modules", "cross", "bag-of-words", "temperature", "sdpa")

MARKER = re.compile(r"^<!--\s*tour:\s*(cpp|python)\s+([\w-]+)((?:\s+[\w-]+)*)\s*-->\s*$")
FLAGS = {"cpp": {"compile-only"}, "python": {"attn-only"}}
FENCE_LANG = {"cpp": "cpp", "python": "python"}
COMMENT = {"cpp": "//", "python": "#"}
NUMBER = re.compile(r"-?\d+\.\d+(?:e[+-]?\d+)?")

COMPILE_TIMEOUT_S = 180
RUN_TIMEOUT_S = 120


# ---- parsing the tour files ----------------------------------------------------------------------

class Block:
    def __init__(self, lang, name, flags, code, line, path="README.md"):
        self.lang, self.name, self.flags, self.code, self.line = lang, name, flags, code, line
        self.path = path
        self.expected = expected_output(code, COMMENT[lang])

    def where(self):
        return "%s:%d (tour: %s %s)" % (self.path, self.line, self.lang, self.name)


def parse_tour(text, path="README.md"):
    """The tour blocks of one file (`path`, relative to the repository root), in file order.
    Raises ValueError for a malformed marker or fence."""
    lines = text.split("\n")
    blocks = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "tour:" in line and line.lstrip().startswith("<!--"):
            m = MARKER.match(line.strip())
            if not m:
                raise ValueError("%s:%d: malformed tour marker %r" % (path, i + 1, line))
            lang, name, flags = m.group(1), m.group(2), set(m.group(3).split())
            if not flags <= FLAGS[lang]:
                raise ValueError("%s:%d: unknown flags %s for %s" % (
                    path, i + 1, sorted(flags - FLAGS[lang]), lang))
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j >= len(lines) or lines[j].strip() != "```" + FENCE_LANG[lang]:
                raise ValueError("%s:%d: the tour marker must be followed by a ```%s block"
                                 % (path, i + 1, FENCE_LANG[lang]))
            k = j + 1
            while k < len(lines) and lines[k].strip() != "```":
                k += 1
            if k >= len(lines):
                raise ValueError("%s:%d: unterminated code block" % (path, j + 1))
            blocks.append(Block(lang, name, flags, "\n".join(lines[j + 1:k]) + "\n", j + 2, path))
            i = k + 1
        else:
            i += 1
    return blocks


def expected_output(code, c):
    """The output a block announces in its `C -> ` comments (see the module docstring)."""
    out = []
    arrow, cont = c + " -> ", c + "    "
    lines = code.split("\n")
    i = 0
    while i < len(lines):
        pos = lines[i].find(arrow)
        if pos < 0:
            i += 1
            continue
        out.append(lines[i][pos + len(arrow):].rstrip())
        i += 1
        chunk = []
        while i < len(lines):
            s = lines[i].strip()
            if s.startswith(cont):
                chunk.append(s[len(cont):].rstrip())
            elif s == c:
                chunk.append("")
            else:
                break
            i += 1
        while chunk and chunk[-1] == "":
            chunk.pop()
        out.extend(chunk)
    return "".join(line + "\n" for line in out)


def normalise(text):
    return "".join(line.rstrip() + "\n" for line in text.rstrip("\n").split("\n")) if text else ""


def diff_message(block, backend, got):
    import difflib
    diff = "\n".join(difflib.unified_diff(block.expected.split("\n"), got.split("\n"),
                                          block.path, backend, lineterm=""))
    return "%s: the output with %s differs from the block's comments:\n%s" % (
        block.where(), backend, diff)


def read_tour():
    """The blocks of every file of TOUR_FILES, in tour order."""
    blocks = []
    for path in TOUR_FILES:
        with open(os.path.join(REPO_ROOT, path), encoding="utf-8") as f:
            blocks.extend(parse_tour(f.read(), path))
    return blocks


@pytest.fixture(scope="module")
def blocks():
    try:
        return read_tour()
    except ValueError as exc:
        pytest.fail(str(exc), pytrace=False)


def test_every_tour_block_is_run():
    """A tour marker outside TOUR_FILES would never run: README.md and docs/*.md hold none."""
    docs = os.path.join(REPO_ROOT, "docs")
    pages = ["README.md"] + sorted("docs/" + n for n in os.listdir(docs) if n.endswith(".md"))
    strays = []
    for path in pages:
        if path in TOUR_FILES:
            continue
        with open(os.path.join(REPO_ROOT, path), encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if "tour:" in line and line.lstrip().startswith("<!--"):
                    strays.append("%s:%d" % (path, n))
    assert not strays, "tour markers outside TOUR_FILES (add the file there): %s" % strays
    for path in TOUR_FILES:
        with open(os.path.join(REPO_ROOT, path), encoding="utf-8") as f:
            assert parse_tour(f.read(), path), "%s is in TOUR_FILES but has no tour block" % path


def test_tour_covers_every_seed_mechanism(blocks):
    for lang in ("cpp", "python"):
        names = [b.name for b in blocks if b.lang == lang]
        assert len(names) == len(set(names)), "%s tour steps named twice: %s" % (lang, names)
        missing = [s for s in REQUIRED_STEPS if s not in names]
        assert not missing, "the %s tour lacks the steps %s" % (lang, missing)
    for b in blocks:
        if b.flags:
            continue
        assert b.expected, "%s prints nothing to check: add `%s -> ` comments" % (
            b.where(), COMMENT[b.lang])


def test_expected_output_convention():
    code = ("print(a)  # -> tensor([1, 2])\n"
            "print(b)\n"
            "# -> tensor([[1., 2.],\n"
            "#            [3., 4.]])\n"
            "#\n"
            "x = 1  # a comment, not output\n"
            "for i in range(2):\n"
            "    print(i)\n"
            "    # -> 0\n"
            "    #    1\n")
    assert expected_output(code, "#") == (
        "tensor([1, 2])\ntensor([[1., 2.],\n        [3., 4.]])\n0\n1\n")
    assert expected_output("f();  // -> a\n//    b\n// c\n", "//") == "a\nb\n"


# ---- Python --------------------------------------------------------------------------------------

# Runs the blocks (JSON list of [file, source]) in order, the blocks of one file in one namespace;
# writes each block's stdout or the traceback of the first failure as JSON.
_PY_RUNNER = r'''
import contextlib, io, json, sys, traceback
src_path, backend, out_path = sys.argv[1:4]
with open(src_path, encoding="utf-8") as f:
    sources = json.load(f)
if backend == "torch":
    import torch, torch.nn.functional as _F
    if not hasattr(_F, "scaled_dot_product_attention"):
        def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
            s = query @ key.transpose(-2, -1) * (scale or query.shape[-1] ** -0.5)
            if is_causal:
                L, S = query.shape[-2], key.shape[-2]
                s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), -torch.inf)
            if attn_mask is not None:
                s = s.masked_fill(~attn_mask, -torch.inf) if attn_mask.dtype == torch.bool \
                    else s + attn_mask
            w = torch.softmax(s, dim=-1)
            if dropout_p > 0:
                w = torch.nn.functional.dropout(w, dropout_p)
            return w @ value
        _F.scaled_dot_product_attention = _sdpa
namespaces = {}
results = []
for i, (path, src) in enumerate(sources):
    ns = namespaces.setdefault(path, {"__name__": "__tour__"})
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            exec(compile(src, "<%s, tour block %d>" % (path, i), "exec"), ns)
    except BaseException:
        results.append({"stdout": buf.getvalue(), "error": traceback.format_exc()})
        break
    results.append({"stdout": buf.getvalue(), "error": None})
with open(out_path, "w", encoding="utf-8") as f:
    json.dump(results, f)
'''

_IMPORT_LINE = re.compile(r"^\s*(import|from)\s")


def to_torch(code):
    """The block as PyTorch code: `attn` becomes `torch` on import lines."""
    return "".join(re.sub(r"\battn\b", "torch", line) if _IMPORT_LINE.match(line) else line
                   for line in code.splitlines(True))


def _child_env():
    """This interpreter's PYTHONPATH with absolute entries (the child runs in a temporary
    directory), the imported attn package's parent first."""
    paths = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    try:
        import attn
        paths.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(attn.__file__))))
    except ImportError:
        pass
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run_python(sources, backend):
    tmp = tempfile.mkdtemp(prefix="readme-py-")
    try:
        src_path, out_path = os.path.join(tmp, "blocks.json"), os.path.join(tmp, "out.json")
        with open(src_path, "w", encoding="utf-8") as f:
            json.dump(sources, f)
        proc = subprocess.run([sys.executable, "-c", _PY_RUNNER, src_path, backend, out_path],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=RUN_TIMEOUT_S, cwd=tmp,
                              env=_child_env())
        if proc.returncode != 0 or not os.path.exists(out_path):
            raise AssertionError("the %s run of the tour's Python blocks failed (exit %d):\n%s"
                                 % (backend, proc.returncode, proc.stdout))
        with open(out_path, encoding="utf-8") as f:
            return json.load(f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


_py_runs = {}


def python_outputs(blocks, backend):
    """{block index: stdout} of the Python tour under `backend` (cached per session)."""
    if backend not in _py_runs:
        chosen = [(i, b) for i, b in enumerate(blocks)
                  if b.lang == "python" and (backend == "attn" or "attn-only" not in b.flags)]
        sources = [[b.path, b.code if backend == "attn" else to_torch(b.code)] for _, b in chosen]
        results = run_python(sources, backend)
        outputs = {}
        for (i, b), r in zip(chosen, results):
            if r["error"]:
                raise AssertionError("%s raised with %s:\n%s" % (b.where(), backend, r["error"]))
            outputs[i] = r["stdout"]
        if len(results) < len(chosen):
            raise AssertionError("the %s run stopped early" % backend)
        _py_runs[backend] = outputs
    return _py_runs[backend]


@pytest.mark.parametrize("backend", ["attn", "torch"])
def test_python_tour(blocks, backend):
    outputs = python_outputs(blocks, backend)
    assert outputs, "no Python tour blocks found in %s" % ", ".join(TOUR_FILES)
    failures = [diff_message(blocks[i], backend, normalise(got))
                for i, got in outputs.items() if normalise(got) != blocks[i].expected]
    assert not failures, "\n\n".join(failures)


# ---- C++ -----------------------------------------------------------------------------------------

def build_dir():
    """The build tree holding libattn.a: $ATTN_BUILD_DIR, else the one the imported attn module
    was built in (build/python/attn -> build), else build/."""
    env = os.environ.get("ATTN_BUILD_DIR")
    if env:
        return os.path.abspath(env)
    try:
        import attn
        d = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(attn.__file__))))
        if os.path.exists(os.path.join(d, "libattn.a")):
            return d
    except ImportError:
        pass
    return os.path.join(REPO_ROOT, "build")


def cmake_cache(bdir, key):
    try:
        with open(os.path.join(bdir, "CMakeCache.txt"), encoding="utf-8") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def cpp_program(blocks):
    """The C++ tour as one translation unit; main prints a separator line before each block and
    runs the blocks of each file in a scope of their own."""
    preamble, functions, body = [], [], []
    order = []
    scope = None  # the file whose scope is open in main
    for i, b in enumerate(blocks):
        if b.lang != "cpp":
            continue
        code = []
        for line in b.code.split("\n"):
            if line.startswith("#include") or line.startswith("using namespace"):
                if line not in preamble:
                    preamble.append(line)
                code.append("")  # keeps the #line numbering right
            else:
                code.append(line)
        code = "\n".join(code)
        located = '#line %d "%s"\n%s\n' % (b.line, b.path, code)  # errors name the .md lines
        if "compile-only" in b.flags:
            functions.append("[[maybe_unused]] static void readme_block_%d() {\n%s}\n"
                             % (i, located))
        else:
            order.append(i)
            if scope != b.path:
                body.append(("}\n" if scope is not None else "") + "{  // %s" % b.path)
                scope = b.path
            body.append('std::cout << "\\n@@tour-block %d@@" << std::endl;\n%s' % (i, located))
    if scope is not None:
        body.append("}")
    src = "\n".join(["#include <exception>", "#include <iostream>"] + preamble) + "\n\n"
    src += "\n".join(functions)
    src += ("\nint main() {\n  try {\n%s\n    std::cout << \"\\n@@tour-end@@\" << std::endl;\n"
            "  } catch (const std::exception& e) {\n    std::cout << std::endl;\n"
            "    std::cerr << \"exception: \" << e.what() << std::endl;\n    return 1;\n  }\n"
            "  return 0;\n}\n" % "\n".join(body))
    return src, order


def link_flags(bdir):
    libs = None
    if shutil.which("pkg-config"):
        proc = subprocess.run(["pkg-config", "--libs", "openblas", "cairo"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              universal_newlines=True)
        if proc.returncode == 0:
            libs = shlex.split(proc.stdout)
    if libs is None:
        libs = ["-lopenblas", "-lcairo"]
    # Products go through oneDNN when the build found it (CMake ATTN_ONEDNN): dnnl_DIR is then
    # a directory in its cache (absent with ATTN_ONEDNN=OFF, ...-NOTFOUND when not installed).
    dnnl = cmake_cache(bdir, "dnnl_DIR")
    if dnnl and not dnnl.endswith("NOTFOUND") and cmake_cache(bdir, "ATTN_ONEDNN") != "OFF":
        libs.append("-ldnnl")
    # The CUDA backend (CMake ATTN_CUDA) links cudart and cuBLAS, found by FindCUDAToolkit.
    if cmake_cache(bdir, "ATTN_CUDA") != "OFF":
        for var in ("CUDA_cublas_LIBRARY", "CUDA_CUDART"):
            path = cmake_cache(bdir, var)
            if path and not path.endswith("NOTFOUND"):
                libs.append(path)
    return ["-fopenmp", "-pthread"] + libs


@pytest.fixture(scope="module")
def cpp_run(blocks):
    """(stdout split per block index, the block indices) of the compiled C++ tour."""
    bdir = build_dir()
    lib = os.path.join(bdir, "libattn.a")
    if not os.path.exists(lib):
        pytest.fail("%s not found: build the library first (cmake --build %s --target attn), "
                    "or set ATTN_BUILD_DIR" % (lib, bdir), pytrace=False)
    cxx = cmake_cache(bdir, "CMAKE_CXX_COMPILER")
    if not cxx or not shutil.which(cxx):
        cxx = os.environ.get("CXX") or "g++"
    if not shutil.which(cxx):
        pytest.skip("no C++ compiler (%s) to build the C++ tour" % cxx)
    src, order = cpp_program(blocks)
    assert order, "no C++ tour blocks found in %s" % ", ".join(TOUR_FILES)
    tmp = tempfile.mkdtemp(prefix="readme-cpp-")
    try:
        src_path, exe = os.path.join(tmp, "tour.cpp"), os.path.join(tmp, "tour")
        with open(src_path, "w", encoding="utf-8") as f:
            f.write(src)
        # The build's own flags too (a sanitizer build's library needs its runtime).
        extra = shlex.split(cmake_cache(bdir, "CMAKE_CXX_FLAGS") or "")
        cmd = ([cxx, "-std=c++20", "-O1", "-Wall", "-Wextra", "-Wno-unused-variable"] + extra
               + ["-I", os.path.join(REPO_ROOT, "include"), src_path, lib, "-o", exe]
               + link_flags(bdir))
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=COMPILE_TIMEOUT_S)
        if proc.returncode != 0:
            pytest.fail("the C++ tour does not compile (%s):\n%s" % (
                " ".join(cmd), proc.stdout), pytrace=False)
        warnings = proc.stdout.strip()
        run = subprocess.run([exe], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True, timeout=RUN_TIMEOUT_S, cwd=tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    parts = re.split(r"\n@@tour-(block \d+|end)@@\n", "\n" + run.stdout)
    outputs = {}
    for tag, text in zip(parts[1::2], parts[2::2]):
        if tag != "end":
            outputs[int(tag.split()[1])] = text
    if run.returncode != 0:
        last = max(outputs) if outputs else None
        pytest.fail("the C++ tour failed (exit %d) in %s:\n%s" % (
            run.returncode, blocks[last].where() if last is not None else "?", run.stderr),
            pytrace=False)
    return outputs, order, warnings


def test_cpp_tour_compiles_cleanly(cpp_run):
    _, _, warnings = cpp_run
    assert not warnings, "the C++ tour compiles with warnings:\n" + warnings


def test_cpp_tour(blocks, cpp_run):
    outputs, order, _ = cpp_run
    assert sorted(outputs) == order, "the C++ tour did not reach every block"
    failures = [diff_message(blocks[i], "C++", normalise(outputs[i]))
                for i in order if normalise(outputs[i]) != blocks[i].expected]
    assert not failures, "\n\n".join(failures)


def test_cpp_numbers_are_pytorchs(blocks):
    """Every number a C++ step prints is printed by the Python step of the same name too, whose
    output the torch run checks against PyTorch."""
    python = {b.name: b.expected for b in blocks if b.lang == "python"}
    problems = []
    for b in blocks:
        if b.lang != "cpp" or b.name not in python:
            continue
        theirs = set(NUMBER.findall(python[b.name]))
        missing = [n for n in NUMBER.findall(b.expected) if n not in theirs]
        if missing:
            problems.append("%s prints %s, which the Python step %r does not" % (
                b.where(), missing, b.name))
    assert not problems, "\n".join(problems)
