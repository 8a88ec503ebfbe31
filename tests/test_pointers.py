"""Every pointer in the code and the docs leads somewhere: a Markdown link to a file (and to its
#anchor, by GitHub's rules for heading anchors), a `path.md#anchor` written in code, and a section
named in words ("benchmarks/README.md, 'A run slowed as a whole'", `see "X" above`) to a heading
of that file. A section moves and its pointers stay behind: issue 59 found 26 modules pointing to
a section of benchmarks/README.md that had moved to benchmarks/history.md."""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Folders whose files are read for pointers (with the extensions read there), and files at the root.
_FOLDERS = ("overrides", "scripts", "tests", "benchmarks", "docs", ".ci")
_EXTENSIONS = (".py", ".md", ".sh", ".toml")
_ROOT_FILES = ("Makefile",)
_SKIPPED = {os.path.join("tests", "old_files")}  # saved result files, no prose

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$", re.M)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# `docs/x.md#anchor` written outside Markdown (a message, a docstring): from the checkout's root.
_BARE_ANCHOR = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w.-]+\.md)#([\w-]+)")
# A section named in words after its file: `FILE, 'Name'`, `FILE's "Name"`, `FILE ("Name")`; a
# quote closes where no letter follows it, so "Where a verdict's seconds go" stays whole.
_NAMED = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*(?:[\w.-]+\.md|README))(?:'s)?[,:]?[ ]\(?"
                    r"(['\"])(.+?)\2(?![A-Za-z])")
# A section of the same Markdown file, or a paragraph's bold lead: `see "Name" above`, `'Name' below`.
_HERE = re.compile(r"(\"|'(?=[A-Z]))([A-Z](?:(?!\1).){2,}?)\1(?![A-Za-z]),? (?:above|below)\b")
_BOLD_LEAD = re.compile(r"^\*\*(.+?)\*\*", re.M)


# Sections named before they are written: each entry is removed when its section lands (the
# test below fails then, to say so). "Real libraries, priced": benchmarks/shipped_libraries.py's
# figures, which the step wing's comments cite and its owner is writing up.
PENDING = {("benchmarks/README.md", "Real libraries, priced")}


def github_anchor_base(heading: str) -> str:
    """The anchor GitHub gives a heading, before duplicates are numbered: the rendered text (code
    spans' contents, links' text, no emphasis marks) in lower case, every character that is not a
    letter, digit, underscore, hyphen or space dropped, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def headings(markdown: str) -> list[str]:
    """A Markdown text's headings (ATX, `#` to `######`), outside fenced code, as written."""
    return [match.group(2).strip() for match in _HEADING.finditer(_FENCE.sub("", markdown))]


def anchors(markdown: str) -> set[str]:
    """Every anchor a Markdown file's headings get on GitHub (a repeated one numbered -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in headings(markdown):
        base = github_anchor_base(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def _plain(heading: str) -> str:
    return re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")


def _files(root: str):
    for folder in _FOLDERS:
        for dirpath, dirs, names in os.walk(os.path.join(root, folder)):
            rel_dir = os.path.relpath(dirpath, root)
            dirs[:] = sorted(d for d in dirs if d != "__pycache__"
                             and os.path.join(rel_dir, d) not in _SKIPPED)
            for name in sorted(names):
                if rel_dir == "tests" and name == os.path.basename(__file__):
                    continue  # this file: made-up pointers
                if name.endswith(_EXTENSIONS) or folder == ".ci":
                    yield os.path.join(rel_dir, name)
    for name in sorted(os.listdir(root)):
        if os.path.isfile(os.path.join(root, name)) and (name.endswith(_EXTENSIONS) or name in _ROOT_FILES):
            yield name


def _prose(rel: str, text: str) -> list[str]:
    """The parts of a file a reader reads as prose, whitespace made single spaces: a Python file's
    strings (implicitly joined ones whole) and its comments, a run of comment lines as one; a
    shell or TOML file's comments likewise; a Markdown file outside its fenced code."""
    if rel.endswith(".md"):
        return [re.sub(r"\s+", " ", _FENCE.sub("", text))]
    parts = []
    if rel.endswith(".py"):
        parts += [node.value for node in ast.walk(ast.parse(text))
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)]
        comments = [(tok.start[0], tok.string[1:]) for tok in
                    tokenize.generate_tokens(io.StringIO(text).readline) if tok.type == tokenize.COMMENT]
    else:
        comments = [(n, line.split("#", 1)[1]) for n, line in enumerate(text.splitlines(), 1)
                    if "#" in line and not line.lstrip().startswith("#!")]
    run, last = [], None
    for line, comment in comments:
        if run and line != last + 1:
            parts.append(" ".join(run))
            run = []
        run.append(comment)
        last = line
    if run:
        parts.append(" ".join(run))
    return [re.sub(r"\s+", " ", part) for part in parts]


def _target(root: str, rel: str, path: str) -> str | None:
    """The file a pointer in `rel` names: from `rel`'s folder in Markdown, else from the root
    (`README` alone is README.md). None when there is none."""
    path = "README.md" if path == "README" else path
    bases = [os.path.dirname(rel)] if rel.endswith(".md") else []
    for base in bases + [""]:
        candidate = os.path.normpath(os.path.join(root, base, path))
        if os.path.exists(candidate):
            return candidate
    return None


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as src:
        return src.read()


def broken_pointers(root: str = ROOT, pending=frozenset()) -> list[str]:
    """`file: pointer (why)` for every pointer under `root` that leads nowhere (a section named
    in `pending`, as (file from the root, name), is let through)."""
    broken = []
    for rel in _files(root):
        text = _read(os.path.join(root, rel))
        for prose in _prose(rel, text):
            links = []
            if rel.endswith(".md"):
                for link in _LINK.findall(_CODE_SPAN.sub("", prose)):
                    if not re.match(r"[a-z][a-z0-9+.-]*:", link):  # http:, mailto: ... not ours
                        path, _, anchor = link.partition("#")
                        links.append((path or os.path.basename(rel), anchor, link))
                for quote, name in _HERE.findall(prose):
                    leads = headings(text) + _BOLD_LEAD.findall(_FENCE.sub("", text))
                    if not any(_plain(lead).startswith(name) for lead in leads):
                        broken.append(f"{rel}: {quote}{name}{quote} (no such heading here)")
            else:
                links += [(path, anchor, f"{path}#{anchor}") for path, anchor in _BARE_ANCHOR.findall(prose)]
            for path, anchor, said in links:
                target = _target(root, rel, path)
                if target is None:
                    broken.append(f"{rel}: {said} (no such file)")
                elif anchor and (not target.endswith(".md") or anchor not in anchors(_read(target))):
                    broken.append(f"{rel}: {said} (no such anchor)")
            for path, quote, name in _NAMED.findall(prose):
                target = _target(root, rel, path)
                if target is None:
                    if "/" in path:  # a bare name may be a file the tool writes (report.md)
                        broken.append(f"{rel}: {path} (no such file)")
                    continue
                if (not any(_plain(h).startswith(name) for h in headings(_read(target)))
                        and (os.path.relpath(target, root), name) not in pending):
                    broken.append(f"{rel}: {path}, {quote}{name}{quote} (no such section)")
    return sorted(set(broken))


def test_every_link_anchor_and_named_section_leads_somewhere():
    broken = broken_pointers(pending=PENDING)
    assert not broken, "pointers that lead nowhere:\n" + "\n".join(broken)


def test_pending_sections_are_still_pending():
    landed = [f"{path}, '{name}'" for path, name in sorted(PENDING)
              if any(_plain(h).startswith(name) for h in headings(_read(os.path.join(ROOT, path))))]
    assert not landed, "written now, so remove from PENDING in tests/test_pointers.py: " + ", ".join(landed)


def test_github_anchors_follow_its_rules():
    text = ("# Top\n## Every Python 3.11-3.13 (and why not 3.10): `sys.monitoring` on 3.12+\n"
            "```sh\n# not a heading\n```\n## A run slowed as a whole\n## A run slowed as a whole\n"
            "### [docs](x.md) *and* a_name's µs\n")
    assert anchors(text) == {"top", "every-python-311-313-and-why-not-310-sysmonitoring-on-312",
                             "a-run-slowed-as-a-whole", "a-run-slowed-as-a-whole-1", "docs-and-a_names-µs"}


def test_the_check_finds_made_up_broken_pointers(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "scripts").mkdir()
    (tmp_path / "README.md").write_text(
        "# Tool\n## Quick start\nSee [timing](docs/timing.md#how-sure-is-a-number), "
        "[gone](docs/gone.md), [wrong](docs/timing.md#how-sure), [here](#quick-start), "
        "[not here](#slow-start) and `[code](docs/nothing.md)`.\n"
        "```\n[in a fence](docs/nothing.md)\n```\n"
        "As said in \"Quick start\" above, and in 'Slow start' below; see \"The tool's lead\" above\n"
        "and \"The tool's end\" below.\n\n**The tool's lead.** A paragraph.\n")
    (tmp_path / "docs" / "timing.md").write_text("# Timing\n## How sure is a number?\n"
                                                 "Back to the [README](../README.md#tool).\n")
    (tmp_path / "benchmarks" / "history.md").write_text("# Earlier\n## Docstring figures (moved)\n")
    (tmp_path / "benchmarks" / "README.md").write_text("# Benchmarks\n## A run slowed as a whole\n")
    (tmp_path / "scripts" / "mod.py").write_text(
        '"""Why (figures: benchmarks/README.md, \'Docstring figures\'), and\n'
        "benchmarks/history.md, 'Docstring\nfigures'; see docs/timing.md, \"How sure is a number\".\"\"\"\n"
        "# slowed (benchmarks/README.md,\n# 'A run slowed as a whole'); (README, \"Which Python\")\n"
        'X = ("see (docs/timing.md#how-sure-is-a-number) and docs/timing.md#gone, " "or benchmarks/'
        'README.md (\\"A twin like\\")")\n'
        "Y = \"report.md's 'Where the time went'\"  # a file the tool writes\n")
    assert broken_pointers(str(tmp_path)) == sorted([
        "README.md: 'Slow start' (no such heading here)",
        "README.md: \"The tool's end\" (no such heading here)",
        "README.md: docs/gone.md (no such file)",
        "README.md: docs/timing.md#how-sure (no such anchor)",
        "README.md: #slow-start (no such anchor)",
        "scripts/mod.py: README, \"Which Python\" (no such section)",
        "scripts/mod.py: benchmarks/README.md, \"A twin like\" (no such section)",
        "scripts/mod.py: benchmarks/README.md, 'Docstring figures' (no such section)",
        "scripts/mod.py: docs/timing.md#gone (no such anchor)",
    ])
