"""bench/md_section.py: each benchmark script owns the text between its markers in BENCHMARKS.md
and nothing else."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import md_section  # noqa: E402


def test_first_write_appends_then_replaces_only_its_own_section(tmp_path):
    p = tmp_path / "B.md"
    p.write_text("# Benchmarks\n\nsummary by hand\n")
    md_section.replace_section(str(p), "a.py", "## A\nfirst\n")
    md_section.replace_section(str(p), "b.py", "## B\none\n")
    md_section.replace_section(str(p), "a.py", "## A\nsecond")
    text = p.read_text()
    assert text == ("# Benchmarks\n\nsummary by hand\n\n"
                    "<!-- a.py:begin -->\n## A\nsecond\n<!-- a.py:end -->\n\n"
                    "<!-- b.py:begin -->\n## B\none\n<!-- b.py:end -->\n")
    assert os.listdir(tmp_path) == ["B.md"]  # no temporary file left behind


def test_missing_file_is_created(tmp_path):
    p = tmp_path / "new.md"
    md_section.replace_section(str(p), "x", "body")
    assert p.read_text() == "<!-- x:begin -->\nbody\n<!-- x:end -->\n"


def test_a_lone_begin_marker_is_not_a_section(tmp_path):
    p = tmp_path / "B.md"
    p.write_text("<!-- x:begin -->\nhalf\n")
    md_section.replace_section(str(p), "x", "whole")
    assert p.read_text().endswith("<!-- x:begin -->\nwhole\n<!-- x:end -->\n")
    assert p.read_text().startswith("<!-- x:begin -->\nhalf\n")
