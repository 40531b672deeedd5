"""The files `attn plot` and `attn heatmap` write, read by independent parsers: SVG through
xml.etree (well-formed, the declared size, the title, drawn content), PNG by its chunks (signature,
IHDR size and colour type, CRCs), PDF by its structure. The pictures' content is checked by the C++
tests (tests/cpp/test_plot.cpp, test_heatmap.cpp); here only that other readers accept the files.

Needs the built `attn` tool: $ATTN_BUILD_DIR/attn, else the build the imported attn module comes
from, else build/attn.
"""
import json
import os
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SVG = "{http://www.w3.org/2000/svg}"

SPEC = {
    "width": 700, "height": 420, "title": "loss & <friends>",
    "charts": [{"x_label": "step", "y_label": "loss",
                "series": [{"name": "train", "x": [0, 100, 200, 300], "y": [4.2, 2.9, 2.5, 2.3]},
                           {"name": "val", "x": [0, 100, 200, 300], "y": [4.3, 3.1, 2.8, 2.7],
                            "marker": "square", "dash": [8, 4]}],
                "reference_lines": [{"y": 2.0, "label": "target"}]}],
}


def attn_cli():
    env = os.environ.get("ATTN_BUILD_DIR")
    candidates = [env] if env else []
    try:
        import attn
        candidates.append(os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(attn.__file__)))))
    except ImportError:
        pass
    candidates.append(os.path.join(REPO_ROOT, "build"))
    for d in candidates:
        exe = os.path.join(d, "attn")
        if os.path.isfile(exe) and os.access(exe, os.X_OK):
            return exe
    pytest.fail("the attn tool was not found in %s: build it first" % candidates, pytrace=False)


def run(args, stdin=None):
    p = subprocess.run([attn_cli()] + args, input=stdin, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def png_chunks(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, kind
        chunks.append((kind, body))
        pos += 12 + length
    return chunks


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("plots")
    out = {}
    for ext in ("png", "svg", "pdf"):
        out["plot." + ext] = d / ("plot." + ext)
        run(["plot", "-", "--out", str(out["plot." + ext])], stdin=json.dumps(SPEC))
        out["heatmap." + ext] = d / ("heatmap." + ext)
        run(["heatmap", "--mechanism", "multihead", "--out", str(out["heatmap." + ext])])
    return out


def test_svg_parses_with_its_size_title_and_drawing(files):
    root = ET.parse(str(files["plot.svg"])).getroot()
    assert root.tag == SVG + "svg"
    assert (root.get("width"), root.get("height")) == ("700px", "420px")
    assert root.get("viewBox") == "0 0 700 420"
    assert root.find(SVG + "title").text == "loss & <friends>"
    # Lines and glyphs: paths, and glyphs placed with <use>.
    assert len(root.findall(".//" + SVG + "path")) > 20
    assert len(root.findall(".//" + SVG + "use")) > 20
    heat = ET.parse(str(files["heatmap.svg"])).getroot()
    assert heat.find(SVG + "title").text.startswith("multihead attention weights")
    # The colour bar is a gradient.
    assert heat.findall(".//" + SVG + "linearGradient")


def test_png_chunks(files):
    for name in ("plot.png", "heatmap.png"):
        chunks = png_chunks(files[name].read_bytes())
        assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND"
        width, height, depth, colour = struct.unpack(">IIBB", chunks[0][1][:10])
        assert depth == 8 and colour in (2, 6)  # RGB or RGBA, 8 bits
        if name == "plot.png":
            assert (width, height) == (700, 420)
        raw = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
        assert len(raw) == height * (1 + width * (3 if colour == 2 else 4))


def test_pdf_structure(files):
    for name in ("plot.pdf", "heatmap.pdf"):
        data = files[name].read_bytes()
        assert data.startswith(b"%PDF-1.")
        assert data.rstrip().endswith(b"%%EOF")
        assert b"/Type /Page" in data and b"/Count 1" in data
        assert b"startxref" in data
    assert b"/MediaBox [ 0 0 700 420 ]" in files["plot.pdf"].read_bytes()


def test_unknown_extension_is_a_usage_error(tmp_path):
    p = subprocess.run([attn_cli(), "heatmap", "--mechanism", "causal", "--out",
                        str(tmp_path / "w.tiff")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert "unknown image format" in p.stderr and ".png, .svg or .pdf" in p.stderr
    assert list(tmp_path.iterdir()) == []
