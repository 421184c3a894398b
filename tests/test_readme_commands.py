"""The docs check: every command in the README's bash blocks runs, and every relative link of
the README and the docs pages points to a file (and heading) that exists.

Commands are the lines of the README's ```bash blocks (joined at a trailing backslash, comments
dropped). Install lines (``pip …``, which also carry the demo and the test command) and the demo
are not run here; every other line must be a ``plasticlab …`` command, run in order in one
temporary directory, with ``--data-dir`` pointed at the real data."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import REAL_DATA, REAL_DATA_MISSING, REPO

README = REPO / "README.md"
DOC_FILES = [README, *sorted((REPO / "docs").rglob("*.md")), REPO / "benchmarks" / "README.md"]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)


def fenced_blocks(text: str, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(text) if lang == language]


def commands(block: str) -> list[list[str]]:
    """The command lines of a bash block as argument lists (continuations joined, comments dropped)."""
    out, pending = [], ""
    for line in block.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        words = shlex.split(pending + line, comments=True)
        pending = ""
        if words:
            out.append(words)
    assert not pending, f"a bash block ends in a line continuation: {block!r}"
    return out


def readme_commands() -> list[list[str]]:
    return [c for block in fenced_blocks(README.read_text(), "bash") for c in commands(block)]


def is_install(words: list[str]) -> bool:
    return words[0] == "pip"


def is_demo(words: list[str]) -> bool:
    return words[:2] == ["plasticlab", "demo"]


def with_real_data(words: list[str], data: Path) -> list[str]:
    """``words`` as the test runs them: ``--data-dir`` at the real datasets, and an argument
    naming a folder of the clone (``docs/reproduction``) made absolute, since the commands run
    in a temporary folder where the README's user stands in the clone's root."""
    out = [str(REPO / w) if not w.startswith("-") and "/" in w and (REPO / w).exists() else w
           for w in words]
    for i, w in enumerate(out):
        if w == "--data-dir":
            out[i + 1] = str(data)
        elif w.startswith("--data-dir="):
            out[i] = f"--data-dir={data}"
    return out


DEMO_COMMAND = "pip install -c constraints.txt -e . && plasticlab demo --data-dir ../shared/data"
SLOW_TESTS_COMMAND = "python -m pytest -q -n auto -m slow --durations=10"
TEST_COMMAND = ('pip install -c constraints.txt -e ".[test]" && '
                'python -m pytest -q -n auto -m "not slow" --durations=10')


def test_readme_opens_with_the_two_setup_commands():
    head = "\n".join(README.read_text().splitlines()[:60])
    blocks = fenced_blocks(head + "\n", "bash")
    for command in (DEMO_COMMAND, TEST_COMMAND):
        assert any(command in b.splitlines() for b in blocks), (
            f"not in a bash block of the README's first 60 lines: {command}")


def test_ci_runs_the_readme_test_command_then_the_slow_tests_and_fails_on_any_nonzero_exit():
    # CI's verdict is the README's test command on a fresh clone, verbatim, as the body of a
    # function the script calls under `set -e`: a failure of either side of its `&&` (pytest's
    # exit code 5, no tests collected, too) ends the script with that code, before the package
    # checks that follow it.
    script = (REPO / ".ci" / "run").read_text().splitlines()
    assert "set -euo pipefail" in script
    i = script.index(TEST_COMMAND)
    assert script[i - 1] == "readme_test_command() {" and script[i + 1] == "}"
    assert script[i + 2] == "readme_test_command"
    # then the long tests the README's command leaves out (-m "not slow"): the whole suite
    assert SLOW_TESTS_COMMAND in script[i + 3:]
    function = "\n".join(script[i - 1:i + 3])
    for body, code in (("(exit 3) && true", 3), ("true && (exit 5)", 5), ("true && true", 0)):
        done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + function.replace(TEST_COMMAND, body)
                               + "\necho after"], capture_output=True, text=True)
        assert done.returncode == code and ("after" in done.stdout) == (code == 0), (body, done)


def test_every_readme_command_is_one_the_check_runs():
    found = readme_commands()
    assert any(w[0] == "plasticlab" and not is_demo(w) for w in found), "no plasticlab command to run"
    for words in found:
        assert is_install(words) or words[0] == "plasticlab", (
            f"README bash line is neither an install line nor a plasticlab command: {shlex.join(words)}")


@pytest.mark.slow
@pytest.mark.skipif(REAL_DATA_MISSING["data_dir"] is not None, reason=REAL_DATA_MISSING["data_dir"] or "")
def test_every_readme_command_runs(tmp_path, monkeypatch, capsys):
    # Each command is `plasticlab`'s main with the README's arguments, in this process, from a
    # temporary folder (a process of its own would take ~2 s of a core to start; the console
    # script itself is tests/test_cli.py's).
    from plasticlab.cli import main

    monkeypatch.setenv("PLASTICLAB_DATA", str(REAL_DATA))
    monkeypatch.chdir(tmp_path)
    ran = 0
    for words in readme_commands():
        if is_install(words) or is_demo(words):
            continue
        argv = with_real_data(words, REAL_DATA)
        if argv[1] in ("run", "sweep") and "--dry-run" not in argv:
            argv.append("--no-progress")
        capsys.readouterr()
        code = main(argv[1:])
        out, err = capsys.readouterr()
        assert code == 0, (f"README command failed (exit {code}): {shlex.join(words)}\n"
                           f"--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}")
        ran += 1
    assert ran > 0


# --- links ------------------------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code (links there are not links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown file, plus explicit <a id=…> ones."""
    text = path.read_text()
    out, seen = set(ANCHOR.findall(text)), {}
    for line in re.sub(r"^```.*?^```", "", text, flags=re.S | re.M).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(prose(path.read_text()))
            if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]


@pytest.mark.parametrize("doc", [d for d in DOC_FILES if d.exists()], ids=lambda d: str(d.relative_to(REPO)))
def test_every_relative_link_points_to_an_existing_file(doc):
    broken = []
    for target in relative_links(doc):
        file, _, fragment = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(f"{target}: no heading #{fragment} in {dest.relative_to(REPO)}")
    assert not broken, f"{doc.relative_to(REPO)}: " + "; ".join(broken)
