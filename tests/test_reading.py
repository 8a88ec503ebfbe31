"""The pages a newcomer reads first stay short enough to read (issue 59): README.md in about five
minutes, at most 250 lines and 1,600 words as `wc -l -w` counts them (the manual lives in docs/),
and benchmarks/README.md at most 600 lines: today's figure for each claim and a short section
each, the older figures in benchmarks/history.md."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# path: (lines, words) at most
LIMITS = {"README.md": (250, 1600), os.path.join("benchmarks", "README.md"): (600, None)}


def over_limits(root: str = ROOT, limits=LIMITS) -> list[str]:
    over = []
    for path, (max_lines, max_words) in sorted(limits.items()):
        with open(os.path.join(root, path), encoding="utf-8") as src:
            text = src.read()
        lines, words = text.count("\n"), len(text.split())  # as wc -l and wc -w count
        if lines > max_lines:
            over.append(f"{path}: {lines} lines (at most {max_lines})")
        if max_words is not None and words > max_words:
            over.append(f"{path}: {words} words (at most {max_words})")
    return over


def test_the_first_pages_stay_short():
    over = over_limits()
    assert not over, "move what is past the limit into docs/ or benchmarks/history.md: " + "; ".join(over)


def test_the_limits_are_counted_as_wc_counts(tmp_path):
    (tmp_path / "README.md").write_text("one two\nthree\n")
    assert over_limits(str(tmp_path), {"README.md": (2, 3)}) == []
    assert over_limits(str(tmp_path), {"README.md": (1, 2)}) == ["README.md: 2 lines (at most 1)",
                                                                "README.md: 3 words (at most 2)"]
