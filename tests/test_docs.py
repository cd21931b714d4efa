"""The documentation: a README short enough to be a manual, text that speaks of the project only, links that resolve."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT

README_MAX_LINES = 400
# How the project was worked on, not what it is: numbered work sessions, tracker items, acceptance checklists,
# numbered runs on a lent machine.
# Spelled in pieces so that this file does not match itself.
NUMBERED = ("sess" + "ion", "iss" + "ue", "ca" + "ll")
PHRASES = ("done" + "-when", "device" + " call")
PROCESS_WORDS = re.compile("|".join([f"{word} [0-9]" for word in NUMBERED] + list(PHRASES)), re.IGNORECASE)
SKIP_DIRS = {
    ".git",
    ".venv",
    "venv",
    "node_modules",
    "__pycache__",
    ".pytest_cache",
    "build",
    "dist",
    "results",
    "outputs",
    "multirun",
    ".ruff_cache",
}
# [text](target) in Markdown, not images' alt text nor code spans' contents (code spans are removed first).
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def tracked_files(root: Path) -> list[Path]:
    """The tracked files: ``git ls-files`` in a checkout, else every file outside build and environment folders."""
    if (root / ".git").exists():
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True).stdout
        return [root / name for name in out.split("\0") if name]
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        files += [Path(folder) / n for n in names]
    return files


def text_of(path: Path) -> str | None:
    """The file's text, or None for a binary file (a NUL byte in its first 8 KiB) or one that is not UTF-8."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def process_words(root: Path) -> list[str]:
    hits = []
    for path in tracked_files(root):
        if not path.is_file():
            continue
        text = text_of(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if PROCESS_WORDS.search(line):
                hits.append(f"{path.relative_to(root)}:{number}: {line.strip()[:100]}")
    return hits


def broken_links(md: Path, root: Path = ROOT) -> list[str]:
    """Relative links of one Markdown file whose target file does not exist (anchors and web links are not
    followed)."""
    text = re.sub(r"```.*?```", "", md.read_text(encoding="utf-8"), flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (md.parent / path).exists():
            broken.append(f"{md.relative_to(root)}: {target}")
    return broken


def docs_markdown() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_the_readme_is_a_manual_of_at_most_400_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_no_tracked_text_speaks_of_how_the_project_is_developed() -> None:
    hits = process_words(ROOT)
    assert not hits, "say it with dates, hardware and versions instead:\n" + "\n".join(hits)


def test_the_guides_exist_and_every_relative_link_resolves() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in docs_markdown()}
    for guide in ("search", "knobs", "results", "failures", "scale-out", "nightly", "architecture"):
        assert f"docs/{guide}.md" in names
    assert any(n.startswith("docs/measurements/") for n in names)
    broken = [b for md in docs_markdown() for b in broken_links(md)]
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("with_git", [True, False])
def test_the_checks_find_what_they_look_for(tmp_path: Path, with_git: bool) -> None:
    """On a planted tree: a process word in a tracked file is found (with and without git), one in an ignored
    environment folder is not, and a link to a missing file is reported while one to an existing file is not."""
    done_when = PHRASES[0].capitalize()
    (tmp_path / "notes.md").write_text(f"Measured on the H200, 2026-12-02.\nAs the {done_when} of the plan said.\n")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "x.py").write_text(f"# {NUMBERED[0]} 4\n")
    (tmp_path / "data.bin").write_bytes(f"\0{NUMBERED[2]} 3".encode())
    if with_git:
        subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
        (tmp_path / ".gitignore").write_text(".venv/\n")
        subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    assert process_words(tmp_path) == [f"notes.md:2: As the {done_when} of the plan said."]

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n")
    probe = tmp_path / "docs" / "index.md"
    probe.write_text(
        "[ok](guide.md#guide) [up](../notes.md) [gone](no-such-file.md) [web](https://x.org) `[c](x.md)`\n"
    )
    assert broken_links(probe, tmp_path) == ["docs/index.md: no-such-file.md"]


def test_readme_installs_a_built_wheel_with_the_report_extra() -> None:
    """The install section shows the wheel path: the build command the test suite's wheel install runs
    (tests/test_install.py), and the wheel of this version installed with the `[report]` extra (quoted)."""
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    install = readme.split("## Install", 1)[1].split("\n## ", 1)[0]
    assert "pip wheel . -w dist --no-deps" in install
    assert f'pip install "dist/torch_knob_sweeper-{version}-py3-none-any.whl[report]"' in install
