"""Screenshots with real headless Chromium, and the PNG checks that catch a blank one."""

import struct
import zlib

import pytest

from overrides.flame import screenshot

FLAMEGRAPH_LIKE = """<svg xmlns="http://www.w3.org/2000/svg" width="1200" height="{height}">
<rect x="0" y="0" width="1200" height="{height}" fill="white"/>
<rect x="10" y="{bar}" width="900" height="16" fill="rgb(230,120,40)"/>
<text x="14" y="{text}" font-size="12">hot_loop_SubTensor</text>
</svg>
"""


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
    assert screenshot.png_size(str(flat)) == (40, 30)
    assert screenshot.png_is_flat(str(flat))


def test_svg_size_reads_the_root_element(tmp_path):
    svg = tmp_path / "g.svg"
    svg.write_text(FLAMEGRAPH_LIKE.format(height=742, bar=700, text=712))
    assert screenshot.svg_size(str(svg)) == (1200, 742)


@pytest.fixture
def browser():
    found = screenshot.find_browser()
    assert found, f"these tests need Chromium: {screenshot.INSTALL_HINT}"
    return found


def test_a_screenshot_is_a_png_of_the_asked_size_and_not_one_colour(tmp_path, browser):
    svg = tmp_path / "graph.svg"
    svg.write_text(FLAMEGRAPH_LIKE.format(height=900, bar=860, text=872))  # the bar is near the bottom
    png = tmp_path / "graph.png"
    assert screenshot.screenshot(str(svg), str(png), browser) == (screenshot.WINDOW_WIDTH, 900)
    assert screenshot.png_size(str(png)) == (screenshot.WINDOW_WIDTH, 900)
    assert screenshot.png_colours(str(png)) > 3  # white, the orange bar, text anti-aliasing


def test_a_failing_browser_is_an_error_with_its_reason_and_leaves_no_png(tmp_path):
    svg = tmp_path / "graph.svg"
    svg.write_text(FLAMEGRAPH_LIKE.format(height=300, bar=260, text=272))
    png = tmp_path / "graph.png"
    with pytest.raises(screenshot.ScreenshotError, match="wrote no PNG"):
        screenshot.screenshot(str(svg), str(png), "/bin/false")
    assert not png.exists()


def test_report_screenshots_run_beside_the_report_and_a_failed_one_is_named(tmp_path, browser):
    """The report's screenshots are taken on a thread while it goes on; one that fails leaves
    no figure, its SVG named in the markdown instead, and a note with the reason."""
    from overrides.review.pack import Pack, without_screenshot

    said, notes = [], []
    pack = Pack(str(tmp_path), said.append, notes)
    good, bad = tmp_path / "good.svg", tmp_path / "bad.svg"
    good.write_text(FLAMEGRAPH_LIKE.format(height=400, bar=360, text=372))
    bad.write_text(FLAMEGRAPH_LIKE.format(height=400, bar=360, text=372))
    assert pack.shoot(str(good), "base-x.png", browser)
    assert pack.shoot(str(bad), "diff-x.png", "/bin/false")  # counted on until it is done
    sections = ["base: ![base-x](base-x.png)\nDifferential flamegraph: ![diff-x](diff-x.png)"]
    failed = pack.finish_screenshots()
    assert failed == ["diff-x.png"] and [f.name for f in pack.files] == ["base-x.png"]
    assert screenshot.png_size(str(tmp_path / "base-x.png"))[0] == screenshot.WINDOW_WIDTH
    assert without_screenshot(sections, "diff-x.png") == [
        "base: ![base-x](base-x.png)\nDifferential flamegraph: `diff-x.svg` (no screenshot, see the notes)"]
    assert any(n.startswith("No diff-x.png: Chromium wrote no PNG") for n in notes)
    assert "report: screenshot base-x.png" in said
