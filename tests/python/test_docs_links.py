"""Every relative link of README.md and docs/*.md leads somewhere: the file exists, and a
`#anchor` is a heading of the target page (GitHub's anchors: lower case, punctuation dropped,
spaces as dashes, `-1`, `-2` for repeats). Links with a scheme (https:, mailto:) are not checked.
Code spans and fenced blocks are skipped, as GitHub does not render links there.
"""
import os
import re

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def pages():
    docs = sorted("docs/" + n for n in os.listdir(os.path.join(REPO_ROOT, "docs"))
                  if n.endswith(".md"))
    return ["README.md"] + docs


def prose_lines(text):
    """(line number, line) outside fenced code blocks, with code spans removed."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        s = line.strip()
        m = re.match(r"^(`{3,}|~{3,})", s)
        if m:
            if fence is None:
                fence = m.group(1)[0] * len(m.group(1))
            elif s.startswith(fence):
                fence = None
            continue
        if fence is None:
            yield n, re.sub(r"`[^`]*`", "", line)


def slug(heading):
    h = re.sub(r"`", "", heading).strip().lower()
    h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h)  # a link's text
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    seen, out = {}, set()
    for _, line in prose_lines(text):
        m = HEADING.match(line)
        if not m:
            continue
        s = slug(m.group(2))
        k = seen.get(s, 0)
        out.add(s if k == 0 else "%s-%d" % (s, k))
        seen[s] = k + 1
    return out


def test_slug_is_githubs():
    assert slug("Several processes: data and context parallelism over MPI") == \
        "several-processes-data-and-context-parallelism-over-mpi"
    assert slug("GPUs (CUDA)") == "gpus-cuda"
    assert slug("The command line: `attn`") == "the-command-line-attn"


@pytest.mark.parametrize("page", pages())
def test_relative_links_resolve(page):
    with open(os.path.join(REPO_ROOT, page), encoding="utf-8") as f:
        text = f.read()
    base = os.path.dirname(os.path.join(REPO_ROOT, page))
    broken = []
    for n, line in prose_lines(text):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # https:, mailto:, ...
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(base, path)) if path else \
                os.path.join(REPO_ROOT, page)
            if not os.path.exists(full):
                broken.append("%s:%d: %s (no such file)" % (page, n, target))
            elif anchor and full.endswith(".md") and anchor not in anchors(full):
                broken.append("%s:%d: %s (no heading with that anchor)" % (page, n, target))
    assert not broken, "\n".join(broken)
