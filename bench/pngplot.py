"""A tiny line-plot rasteriser and PNG writer: the standard library only (zlib, struct).

bench/compare.py draws bench/attention_gflops.png with it, so the benchmark needs no matplotlib.

    canvas = Canvas(800, 500)
    canvas.text(10, 10, "Hello", (0, 0, 0), scale=2)
    canvas.save("out.png")

    line_plot(canvas, (x0, y0, w, h), series=[Series("attn", [(512, 40.0), ...], (31, 119, 180))],
              title="forward", x_label="L", y_label="GFLOP/s", log2_x=True)

Text uses a built-in 5x8 bitmap font (ASCII 32..126; anything else draws as '?').
"""
import math
import struct
import zlib

# ---- font: 5 columns x 8 rows per glyph, '1' = ink; row 7 holds descenders -----------------------
_GLYPHS = {
    " ": "00000 00000 00000 00000 00000 00000 00000 00000",
    "0": "01110 10001 10011 10101 11001 10001 01110 00000",
    "1": "00100 01100 00100 00100 00100 00100 01110 00000",
    "2": "01110 10001 00001 00010 00100 01000 11111 00000",
    "3": "11111 00010 00100 00010 00001 10001 01110 00000",
    "4": "00010 00110 01010 10010 11111 00010 00010 00000",
    "5": "11111 10000 11110 00001 00001 10001 01110 00000",
    "6": "00110 01000 10000 11110 10001 10001 01110 00000",
    "7": "11111 00001 00010 00100 01000 01000 01000 00000",
    "8": "01110 10001 10001 01110 10001 10001 01110 00000",
    "9": "01110 10001 10001 01111 00001 00010 01100 00000",
    "A": "01110 10001 10001 11111 10001 10001 10001 00000",
    "B": "11110 10001 10001 11110 10001 10001 11110 00000",
    "C": "01110 10001 10000 10000 10000 10001 01110 00000",
    "D": "11100 10010 10001 10001 10001 10010 11100 00000",
    "E": "11111 10000 10000 11110 10000 10000 11111 00000",
    "F": "11111 10000 10000 11110 10000 10000 10000 00000",
    "G": "01110 10001 10000 10111 10001 10001 01111 00000",
    "H": "10001 10001 10001 11111 10001 10001 10001 00000",
    "I": "01110 00100 00100 00100 00100 00100 01110 00000",
    "J": "00111 00010 00010 00010 00010 10010 01100 00000",
    "K": "10001 10010 10100 11000 10100 10010 10001 00000",
    "L": "10000 10000 10000 10000 10000 10000 11111 00000",
    "M": "10001 11011 10101 10101 10001 10001 10001 00000",
    "N": "10001 10001 11001 10101 10011 10001 10001 00000",
    "O": "01110 10001 10001 10001 10001 10001 01110 00000",
    "P": "11110 10001 10001 11110 10000 10000 10000 00000",
    "Q": "01110 10001 10001 10001 10101 10010 01101 00000",
    "R": "11110 10001 10001 11110 10100 10010 10001 00000",
    "S": "01111 10000 10000 01110 00001 00001 11110 00000",
    "T": "11111 00100 00100 00100 00100 00100 00100 00000",
    "U": "10001 10001 10001 10001 10001 10001 01110 00000",
    "V": "10001 10001 10001 10001 10001 01010 00100 00000",
    "W": "10001 10001 10001 10101 10101 10101 01010 00000",
    "X": "10001 10001 01010 00100 01010 10001 10001 00000",
    "Y": "10001 10001 10001 01010 00100 00100 00100 00000",
    "Z": "11111 00001 00010 00100 01000 10000 11111 00000",
    "a": "00000 00000 01110 00001 01111 10001 01111 00000",
    "b": "10000 10000 10110 11001 10001 10001 11110 00000",
    "c": "00000 00000 01110 10000 10000 10001 01110 00000",
    "d": "00001 00001 01101 10011 10001 10001 01111 00000",
    "e": "00000 00000 01110 10001 11111 10000 01110 00000",
    "f": "00110 01001 01000 11100 01000 01000 01000 00000",
    "g": "00000 00000 01111 10001 10001 01111 00001 01110",
    "h": "10000 10000 10110 11001 10001 10001 10001 00000",
    "i": "00100 00000 01100 00100 00100 00100 01110 00000",
    "j": "00010 00000 00110 00010 00010 00010 10010 01100",
    "k": "10000 10000 10010 10100 11000 10100 10010 00000",
    "l": "01100 00100 00100 00100 00100 00100 01110 00000",
    "m": "00000 00000 11010 10101 10101 10001 10001 00000",
    "n": "00000 00000 10110 11001 10001 10001 10001 00000",
    "o": "00000 00000 01110 10001 10001 10001 01110 00000",
    "p": "00000 00000 11110 10001 10001 11110 10000 10000",
    "q": "00000 00000 01101 10011 10001 01111 00001 00001",
    "r": "00000 00000 10110 11001 10000 10000 10000 00000",
    "s": "00000 00000 01110 10000 01110 00001 11110 00000",
    "t": "01000 01000 11100 01000 01000 01001 00110 00000",
    "u": "00000 00000 10001 10001 10001 10011 01101 00000",
    "v": "00000 00000 10001 10001 10001 01010 00100 00000",
    "w": "00000 00000 10001 10001 10101 10101 01010 00000",
    "x": "00000 00000 10001 01010 00100 01010 10001 00000",
    "y": "00000 00000 10001 10001 10001 01111 00001 01110",
    "z": "00000 00000 11111 00010 00100 01000 11111 00000",
    ".": "00000 00000 00000 00000 00000 01100 01100 00000",
    ",": "00000 00000 00000 00000 00000 01100 00100 01000",
    ":": "00000 01100 01100 00000 01100 01100 00000 00000",
    ";": "00000 01100 01100 00000 01100 00100 01000 00000",
    "/": "00000 00001 00010 00100 01000 10000 00000 00000",
    "\\": "00000 10000 01000 00100 00010 00001 00000 00000",
    "(": "00010 00100 01000 01000 01000 00100 00010 00000",
    ")": "01000 00100 00010 00010 00010 00100 01000 00000",
    "[": "01110 01000 01000 01000 01000 01000 01110 00000",
    "]": "01110 00010 00010 00010 00010 00010 01110 00000",
    "{": "00010 00100 00100 01000 00100 00100 00010 00000",
    "}": "01000 00100 00100 00010 00100 00100 01000 00000",
    "-": "00000 00000 00000 11111 00000 00000 00000 00000",
    "+": "00000 00100 00100 11111 00100 00100 00000 00000",
    "=": "00000 00000 11111 00000 11111 00000 00000 00000",
    "*": "00000 00100 10101 01110 10101 00100 00000 00000",
    "%": "11000 11001 00010 00100 01000 10011 00011 00000",
    "_": "00000 00000 00000 00000 00000 00000 11111 00000",
    "<": "00010 00100 01000 10000 01000 00100 00010 00000",
    ">": "01000 00100 00010 00001 00010 00100 01000 00000",
    "^": "00100 01010 10001 00000 00000 00000 00000 00000",
    "!": "00100 00100 00100 00100 00100 00000 00100 00000",
    "?": "01110 10001 00001 00010 00100 00000 00100 00000",
    "'": "00100 00100 01000 00000 00000 00000 00000 00000",
    '"': "01010 01010 00000 00000 00000 00000 00000 00000",
    "`": "01000 00100 00000 00000 00000 00000 00000 00000",
    "|": "00100 00100 00100 00100 00100 00100 00100 00000",
    "~": "00000 00000 01000 10101 00010 00000 00000 00000",
    "#": "01010 01010 11111 01010 11111 01010 01010 00000",
    "@": "01110 10001 10111 10101 10111 10000 01110 00000",
    "&": "01100 10010 10100 01000 10101 10010 01101 00000",
    "$": "00100 01111 10100 01110 00101 11110 00100 00000",
}
_FONT = {ch: [[c == "1" for c in row] for row in rows.split()] for ch, rows in _GLYPHS.items()}
GLYPH_W, GLYPH_H = 5, 8


def text_width(s, scale=1):
    """Pixels taken by s drawn at `scale` (one blank column between glyphs)."""
    return max(0, len(s) * (GLYPH_W + 1) * scale - scale)


# ---- PNG -----------------------------------------------------------------------------------------
def _chunk(kind, data):
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def encode_png(width, height, rgb):
    """8-bit RGB PNG bytes from a bytes-like of width*height*3 samples, row-major."""
    stride = width * 3
    raw = b"".join(b"\x00" + bytes(rgb[y * stride:(y + 1) * stride]) for y in range(height))
    return (b"\x89PNG\r\n\x1a\n"
            + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + _chunk(b"IDAT", zlib.compress(raw, 9))
            + _chunk(b"IEND", b""))


# ---- canvas --------------------------------------------------------------------------------------
class Canvas:
    def __init__(self, width, height, background=(255, 255, 255)):
        self.w, self.h = width, height
        self.px = bytearray(bytes(background) * (width * height))

    def set(self, x, y, color):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i:i + 3] = bytes(color)

    def rect(self, x0, y0, x1, y1, color):
        """Filled rectangle, corners inclusive."""
        x0, x1 = sorted((int(round(x0)), int(round(x1))))
        y0, y1 = sorted((int(round(y0)), int(round(y1))))
        x0, y0 = max(x0, 0), max(y0, 0)
        x1, y1 = min(x1, self.w - 1), min(y1, self.h - 1)
        if x0 > x1 or y0 > y1:
            return
        row = bytes(color) * (x1 - x0 + 1)
        for y in range(y0, y1 + 1):
            i = (y * self.w + x0) * 3
            self.px[i:i + len(row)] = row

    def line(self, x0, y0, x1, y1, color, width=1, dash=None):
        """A line `width` pixels thick; dash=(on, off) in pixels along the line."""
        n = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
        r0 = (width - 1) // 2
        for i in range(n):
            if dash and (i % (dash[0] + dash[1])) >= dash[0]:
                continue
            t = i / (n - 1) if n > 1 else 0.0
            x = int(round(x0 + (x1 - x0) * t))
            y = int(round(y0 + (y1 - y0) * t))
            self.rect(x - r0, y - r0, x - r0 + width - 1, y - r0 + width - 1, color)

    def polyline(self, points, color, width=1, dash=None):
        for (xa, ya), (xb, yb) in zip(points, points[1:]):
            self.line(xa, ya, xb, yb, color, width, dash)

    def marker(self, x, y, kind, color, size=4):
        x, y = int(round(x)), int(round(y))
        if kind == "square":
            self.rect(x - size, y - size, x + size, y + size, color)
        elif kind == "triangle":
            for dy in range(-size, size + 1):
                half = (dy + size) // 2
                self.rect(x - half, y + dy, x + half, y + dy, color)
        else:  # disc
            for dy in range(-size, size + 1):
                half = int(math.sqrt(max(size * size + size - dy * dy, 0)))
                self.rect(x - half, y + dy, x + half, y + dy, color)

    def text(self, x, y, s, color, scale=1, rotate=False, align="left"):
        """Draws s with its top-left corner at (x, y); rotate=True draws it bottom-to-top, with
        (x, y) the top-left of the rotated box. align: left, center or right (along the text)."""
        width = text_width(s, scale)
        offset = {"left": 0, "center": width // 2, "right": width}[align]
        for n, ch in enumerate(s):
            glyph = _FONT.get(ch, _FONT["?"])
            for gy, row in enumerate(glyph):
                for gx, ink in enumerate(row):
                    if not ink:
                        continue
                    u = n * (GLYPH_W + 1) * scale + gx * scale - offset  # along the text
                    v = gy * scale  # across the text
                    if rotate:
                        self.rect(x + v, y - u - scale + 1, x + v + scale - 1, y - u, color)
                    else:
                        self.rect(x + u, y + v, x + u + scale - 1, y + v + scale - 1, color)

    def save(self, path):
        with open(path, "wb") as f:
            f.write(encode_png(self.w, self.h, self.px))


# ---- line plot -----------------------------------------------------------------------------------
class Series:
    def __init__(self, label, points, color, dash=None, marker="disc"):
        self.label, self.points, self.color = label, points, color
        self.dash, self.marker = dash, marker


def nice_ticks(lo, hi, count=6):
    """Round tick values covering [lo, hi]."""
    span = max(hi - lo, 1e-12)
    raw = span / max(count - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks, t = [], start
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 10))
        t += step
    if ticks[-1] < hi:
        ticks.append(round(t, 10))
    return ticks


def _fmt_tick(v):
    return ("%d" % v) if abs(v - round(v)) < 1e-9 else ("%g" % v)


GRID = (225, 225, 225)
AXIS = (40, 40, 40)
INK = (20, 20, 20)


def line_plot(canvas, box, series, title="", x_label="", y_label="", log2_x=False,
              hlines=(), y_max=None, scale=2):
    """Draws axes, grid, ticks and the series inside box = (x, y, w, h) (outer bounds).

    hlines: (value, label, color) horizontal reference lines (dashed)."""
    bx, by, bw, bh = box
    ch = GLYPH_H * scale
    left, right = bx + 8 * scale + ch + 5 * (GLYPH_W + 1) * scale, bx + bw - 10
    top, bottom = by + ch + 14, by + bh - 2 * ch - 18
    xs = [p[0] for s in series for p in s.points]
    ys = [p[1] for s in series for p in s.points] + [h[0] for h in hlines]
    if not xs:
        xs = [1, 2]
    fx = (lambda v: math.log2(v)) if log2_x else (lambda v: v)
    x_lo, x_hi = fx(min(xs)), fx(max(xs))
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    pad = (x_hi - x_lo) * 0.06
    x_lo, x_hi = x_lo - pad, x_hi + pad
    y_ticks = nice_ticks(0.0, y_max if y_max else max(ys + [1e-9]) * 1.08)
    y_lo, y_hi = y_ticks[0], y_ticks[-1]

    def px(v):
        return left + (fx(v) - x_lo) / (x_hi - x_lo) * (right - left)

    def py(v):
        return bottom - (v - y_lo) / (y_hi - y_lo) * (bottom - top)

    # grid, ticks and labels
    for t in y_ticks:
        y = py(t)
        canvas.line(left, y, right, y, GRID)
        canvas.line(left - 5, y, left, y, AXIS)
        canvas.text(left - 8 - text_width(_fmt_tick(t), scale), int(y) - ch // 2, _fmt_tick(t),
                    INK, scale)
    x_ticks = sorted(set(xs))
    for t in x_ticks:
        x = px(t)
        canvas.line(x, top, x, bottom, GRID)
        canvas.line(x, bottom, x, bottom + 5, AXIS)
        canvas.text(int(x), bottom + 9, _fmt_tick(t), INK, scale, align="center")
    canvas.line(left, top, left, bottom, AXIS, 2)
    canvas.line(left, bottom, right, bottom, AXIS, 2)
    if title:
        canvas.text((left + right) // 2, by + 4, title, INK, scale, align="center")
    if x_label:
        canvas.text((left + right) // 2, bottom + 9 + ch + 8, x_label, INK, scale, align="center")
    if y_label:
        canvas.text(bx + 4, (top + bottom) // 2, y_label, INK, scale, rotate=True, align="center")

    for value, label, color in hlines:
        y = py(value)
        canvas.line(left, y, right, y, color, 2, dash=(10, 6))
        canvas.text(right - 4, int(y) - ch - 4, label, color, scale, align="right")
    for s in series:
        pts = [(px(x), py(y)) for x, y in sorted(s.points) if y is not None]
        canvas.polyline(pts, s.color, 3, s.dash)
        for x, y in pts:
            canvas.marker(x, y, s.marker, s.color, 5)


def legend(canvas, x, y, series, scale=2, columns=2, col_width=None):
    """Legend entries (line sample, marker, label) in `columns` columns starting at (x, y)."""
    ch = GLYPH_H * scale
    col_width = col_width or max(text_width(s.label, scale) for s in series) + 80
    for i, s in enumerate(series):
        cx = x + (i % columns) * col_width
        cy = y + (i // columns) * (ch + 12)
        canvas.line(cx, cy + ch // 2, cx + 44, cy + ch // 2, s.color, 3, s.dash)
        canvas.marker(cx + 22, cy + ch // 2, s.marker, s.color, 5)
        canvas.text(cx + 54, cy, s.label, INK, scale)


if __name__ == "__main__":  # a self-check image: python3 bench/pngplot.py /tmp/check.png
    import sys
    c = Canvas(900, 560)
    demo = [Series("attn", [(512, 40), (1024, 60), (2048, 70), (4096, 72)], (31, 119, 180)),
            Series("torch", [(512, 20), (1024, 18), (2048, 15), (4096, 12)], (214, 39, 40),
                   dash=(12, 6), marker="square")]
    line_plot(c, (0, 0, 900, 480), demo, title="Demo: GFLOP/s vs L", x_label="sequence length L",
              y_label="GFLOP/s", log2_x=True, hlines=[(90, "sgemm 1024^3", (90, 90, 90))])
    legend(c, 120, 500, demo)
    c.text(10, 540, "".join(chr(i) for i in range(32, 127)), INK, 1)
    c.save(sys.argv[1] if len(sys.argv) > 1 else "/tmp/pngplot_demo.png")
