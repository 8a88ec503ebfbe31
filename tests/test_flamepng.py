"""Flamegraph PNGs drawn by matplotlib from the SVG's own layout (no browser), and the PNG checks.

`assert_frames_readable` is what every test of a picture checks (the report's too): the PNG is
the SVG's size, and each named frame's box is in its place, in its colour, with its label drawn
across the width the SVG gives it.
"""

import os
import struct
import sys
import zlib

import pytest

from overrides.flame import flamepng, flamesvg

LOOP = "hot_loop_SubTensor (<hot loop: torch.add(x, y)>)"
SHIM = "_shim (_overrides_shim.py)"
WEIGHTS = flamesvg.tree_from_stacks({
    (LOOP, "torch::autograd::THPVariable_add (libtorch_python.so)", "Tensor.__torch_function__ (torch/_tensor.py)"): 700,
    (LOOP, "torch::autograd::THPVariable_add (libtorch_python.so)", "at::_ops::add_Tensor::call (libtorch_cpu.so)"): 250,
    (LOOP, "torch::autograd::THPVariable_add (libtorch_python.so)", SHIM): 2,  # ~3 px: a callout
    (LOOP, "THPVariable_dealloc (libtorch_python.so)"): 48,
})
DARK = 160  # a pixel of a label: every channel below this (the fills are light, their max >= 215)


def _drawing(**overrides):
    fields = dict(weights=WEIGHTS, title="SubTensor · torch.add: base & <branch>", subtitle="",
                  footer='footer "quoted" $x$ 100%', colour=lambda path: flamesvg.warm_colour(path[-1]),
                  tooltip=lambda path, weight: f"{path[-1]}: {weight:,.0f} samples",
                  named=lambda path: path[-1] == SHIM)
    fields.update(overrides)
    return flamesvg.draw(**fields)


def _pixels(png_path):
    import matplotlib.image

    return (matplotlib.image.imread(png_path)[..., :3] * 255).round().astype(int)


def assert_frames_readable(svg_text: str, png_path: str, names) -> None:
    """The PNG drawn from `svg_text` is its size and not one colour, and each frame whose label
    starts with one of `names` is readable there: its box's middle in the SVG's fill (or, for a
    callout, a white ground framed in the frame's colour), and dark label pixels from the
    label's start across the width flamesvg fitted it to (within a fifth and a letter)."""
    drawing = flamesvg.read_svg(svg_text)
    assert flamepng.png_size(png_path) == (drawing.width, min(drawing.height, flamepng.MAX_HEIGHT))
    assert flamepng.png_colours(png_path) > 3
    image = _pixels(png_path)
    for name in names:
        box = next((b for b in drawing.boxes if b.label.startswith(name)), None)
        assert box is not None, f"no labelled frame {name!r} in the SVG"
        top, bottom = int(box.y) + 1, int(box.y + box.height) - 1
        left, right = int(box.x) + 2, int(box.x + box.width) - 1
        region = image[top:bottom, left:right]
        fill = flamepng.colour(box.fill)
        fill = (255, 255, 255) if isinstance(fill, str) else tuple(round(c * 255) for c in fill)
        assert (abs(image[top, left] - fill) <= 2).all(), (name, image[top, left], fill)  # above the letters
        columns = [i + left for i, dark in enumerate((region.max(axis=2) < DARK).any(axis=0)) if dark]
        assert columns, f"{name}: no label drawn in its box"
        wide = len(box.label) * flamesvg.CHAR_WIDTH * (flamesvg.BOLD_WIDTH if box.bold else 1)
        # within a letter: an underscore is too faint low in the box to count as dark
        assert abs(columns[0] - box.label_x) <= flamesvg.CHAR_WIDTH, (name, columns[0], box.label_x)
        assert abs((columns[-1] - columns[0]) - wide) <= wide / 5 + flamesvg.CHAR_WIDTH, (
            name, columns[-1] - columns[0], wide)


def _png(path, width, height, rgb):
    row = b"\x00" + bytes(rgb) * width
    raw = zlib.compress(row * height)

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", raw) + chunk(b"IEND", b""))


def test_png_checks_tell_flat_from_drawn(tmp_path):
    flat = tmp_path / "flat.png"
    _png(flat, 40, 30, (255, 255, 255))
    assert flamepng.png_size(str(flat)) == (40, 30)
    assert flamepng.png_is_flat(str(flat))


def test_the_svg_holds_its_drawing_exactly():
    """What the PNG is drawn from is what the SVG says, to the hundredth of a pixel: text that
    needs escaping, an empty line, a callout over its neighbours."""
    drawing = _drawing()
    assert any(b.bold and b.label == "_shim" for b in drawing.boxes)  # the callout is there
    assert flamesvg.read_svg(flamesvg.svg_text(drawing)) == drawing
    assert flamesvg.render(WEIGHTS, drawing.title, "", drawing.texts[-1].text,
                           lambda path: flamesvg.warm_colour(path[-1]),
                           lambda path, weight: f"{path[-1]}: {weight:,.0f} samples",
                           lambda path: path[-1] == SHIM) == flamesvg.svg_text(drawing)


def test_a_flamegraph_png_is_drawn_without_a_browser_and_reads_like_its_svg(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))  # no browser could be found
    monkeypatch.setenv("CHROMIUM", str(tmp_path / "no-chromium-here"))
    svg = flamesvg.svg_text(_drawing())
    (tmp_path / "graph.svg").write_text(svg, encoding="utf-8")
    png = str(tmp_path / "graph.png")
    assert flamepng.write_png(str(tmp_path / "graph.svg"), png) == (flamesvg.SVG_WIDTH, _drawing().height)
    assert_frames_readable(svg, png, ["hot_loop_SubTensor", "torch::autograd::THPVariable_add",
                                      "Tensor.__torch_function__", "_shim"])
    assert sorted(os.listdir(tmp_path)) == ["graph.png", "graph.svg"]  # nothing left beside it


def test_an_svg_this_tool_did_not_draw_is_an_error_naming_it_and_leaves_no_png(tmp_path):
    """py-spy's own flamegraph (`pyspybench.py --record x.svg`) carries a script: not ours."""
    svg = tmp_path / "pyspy.svg"
    svg.write_text('<svg xmlns="http://www.w3.org/2000/svg" width="1200" height="300" onload="init(evt)">'
                   '<defs/><script>init()</script></svg>')
    with pytest.raises(flamepng.PngError, match="pyspy.svg is not a flamegraph this tool drew: it holds a <defs>"):
        flamepng.write_png(str(svg), str(tmp_path / "pyspy.png"))
    svg.write_text('<svg xmlns="http://www.w3.org/2000/svg" width="1200" height="300"><g><rect x="left"/></g></svg>')
    with pytest.raises(flamepng.PngError, match="an element this tool would not write"):
        flamepng.write_png(str(svg), str(tmp_path / "pyspy.png"))
    assert os.listdir(tmp_path) == ["pyspy.svg"]


def test_report_pngs_are_drawn_beside_the_report_and_a_failed_one_is_named(tmp_path):
    """The report's PNGs are drawn on a thread while it goes on; one that fails leaves no
    figure, its SVG named in the markdown instead, and a note with the reason."""
    from overrides.review.pack import Pack, without_picture

    said, notes = [], []
    pack = Pack(str(tmp_path), said.append, notes)
    good, bad = tmp_path / "good.svg", tmp_path / "bad.svg"
    good.write_text(flamesvg.svg_text(_drawing()), encoding="utf-8")
    bad.write_text('<svg xmlns="http://www.w3.org/2000/svg" width="1200" height="300"><script/></svg>')
    assert pack.picture(str(good), "base-x.png")
    assert pack.picture(str(bad), "diff-x.png")  # counted on until it is done
    sections = ["base: ![base-x](base-x.png)\nDifferential flamegraph: ![diff-x](diff-x.png)"]
    failed = pack.finish_pictures()
    assert failed == ["diff-x.png"] and [f.name for f in pack.files] == ["base-x.png"]
    assert flamepng.png_size(str(tmp_path / "base-x.png"))[0] == flamesvg.SVG_WIDTH
    assert without_picture(sections, "diff-x.png") == [
        "base: ![base-x](base-x.png)\nDifferential flamegraph: `diff-x.svg` (no PNG, see the notes)"]
    assert notes == ["No diff-x.png: bad.svg is not a flamegraph this tool drew: it holds a <script>, "
                     "which this tool's flamegraphs never do (py-spy's own SVG?)."]
    assert "report: drawing base-x.png" in said


def test_without_matplotlib_the_report_says_once_how_to_get_its_pngs(tmp_path, monkeypatch):
    from overrides.review.pack import Pack

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails, as where it is missing
    notes = []
    pack = Pack(str(tmp_path), lambda message: None, notes)
    (tmp_path / "a.svg").write_text(flamesvg.svg_text(_drawing()), encoding="utf-8")
    assert not pack.picture(str(tmp_path / "a.svg"), "a.png") and not pack.picture(str(tmp_path / "a.svg"), "b.png")
    assert notes == [f"No PNGs were drawn: {sys.executable} has no matplotlib; install it "
                     f"(`{sys.executable} -m pip install matplotlib`; `make test` does), then run this again."]
    assert pack.finish_pictures() == [] and pack.files == []
    with pytest.raises(flamepng.PngError, match="has no matplotlib; install it"):
        flamepng.write_png(str(tmp_path / "a.svg"), str(tmp_path / "a.png"))

