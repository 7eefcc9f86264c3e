"""Tier 1: pure Python. No root, no BPF, no namespace: a test here that needs
them belongs in tests/bpf or tests/lab, and collection says so."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT_MARKS = {"root", "bpf", "netns"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    wrong = [
        f"{item.nodeid} ({', '.join(sorted(marks))})"
        for item in items
        if here in item.path.parents
        and (marks := {m.name for m in item.iter_markers()} & ROOT_MARKS)
    ]
    if wrong:
        raise pytest.UsageError(
            "unit tests must not need root; move these to tests/bpf or tests/lab: "
            + "; ".join(wrong)
        )
