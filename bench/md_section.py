"""BENCHMARKS.md is written by several scripts, each owning the text between its own markers
<!-- NAME:begin --> and <!-- NAME:end -->; what lies outside them (the summary, notes written by
hand, other scripts' sections) is kept."""
import os


def markers(name):
    return "<!-- %s:begin -->" % name, "<!-- %s:end -->" % name


def replace_section(path, name, md):
    """Puts md between NAME's markers in path (appended at the end the first time), atomically
    (a temporary file renamed over the old one)."""
    begin, end = markers(name)
    block = begin + "\n" + md.strip("\n") + "\n" + end
    text = open(path).read() if os.path.exists(path) else ""
    if begin in text and end in text[text.index(begin):]:
        i = text.index(begin)
        j = text.index(end, i) + len(end)
        text = text[:i] + block + text[j:]
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + block + "\n"
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
