"""Every repository path that the docs, the BPF sources, the scripts and the
modules cite exists, and nothing cites a design file outside the repository:
a reader who follows a reference must land on something."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A path into one of the repository's top-level folders, not the tail of a longer path.
CITED = re.compile(
    r"(?<![\w./-])((?:bpf|mrc_nic|tests|scripts|docs|netns|examples|\.ci)/[A-Za-z0-9_./-]*[A-Za-z0-9_])"
)

# Paths that are not this repository's, said so on the line that cites them.
ELSEWHERE = {
    "examples/ev_expansion": "the OCP MRC repository's EV expansion example",
    "examples/benchmark/mrc_example.c": "the OCP MRC repository's reference benchmark",
    "mrc_nic/_data/bpf": "bpf/ as an installed package carries it",
    "mrc_nic/_data/netns": "netns/ as an installed package carries it",
}
PLACEHOLDER = re.compile(r"(^|/)(X|x|NAME|name)(\.\w+)?$")


def cited_files() -> list[Path]:
    files = [ROOT / "README.md", *ROOT.glob("*/README.md"), *ROOT.glob("docs/*.md")]
    files += [f for f in ROOT.glob("tests/**/*.py") if f != Path(__file__).resolve()]
    files += [*ROOT.glob("bpf/*.[ch]"), *ROOT.glob("scripts/*"), *ROOT.glob("examples/*.py")]
    files += [*ROOT.glob("mrc_nic/**/*.py"), *ROOT.glob("netns/*.toml")]
    return sorted(f for f in files if f.is_file() and ".venv" not in f.parts)


def missing_paths(path: Path, text: str | None = None) -> list[str]:
    """`path:line: cited` for each cited path that exists neither from the
    repository's root nor from the citing file's folder."""
    text = path.read_text(errors="replace") if text is None else text
    missing = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in CITED.finditer(line):
            cited = m.group(1).rstrip(".")
            after = line[m.end() : m.end() + 1]
            if after in ("*", "<", "{") or cited in ELSEWHERE or PLACEHOLDER.search(cited):
                continue  # a glob, a template, or somebody else's file
            if not ((ROOT / cited).exists() or (path.parent / cited).exists()):
                missing.append(f"{path.relative_to(ROOT)}:{n}: {cited}")
    return missing


@pytest.mark.parametrize("path", cited_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_cited_path_exists(path):
    assert missing_paths(path) == []


def test_the_check_finds_a_missing_path():
    doc = ROOT / "docs" / "probe.md"
    text = "see mrc_nic/no_such_module.py, `bpf/nic_rx.h` and scripts/X.py\n"
    assert missing_paths(doc, text) == ["docs/probe.md:1: mrc_nic/no_such_module.py"]


def test_nothing_cites_a_design_file_outside_the_repository():
    outside = re.compile(r"\bDESIGN\b|\.\./shared/|STYLE\.md")
    hits = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in cited_files()
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if outside.search(line)
    ]
    assert hits == []
