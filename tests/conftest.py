"""The tests come in three tiers, one folder each (docs: tests/README.md):

- unit/: pure Python, no root;
- bpf/: the BPF programs through BPF_PROG_TEST_RUN, no lab (root, bcc);
- lab/: real labs in network namespaces (root, bcc, iproute2).

Each tier's conftest.py marks its tests (root, bpf, netns) and skips them with
the reason when this machine lacks what they need, so `pytest -m "not root"`
selects exactly tests/unit. Helpers shared by test files live in
tests/helpers/, never in a test file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TIERS = ("unit", "bpf", "lab")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    outside = sorted(
        {
            str(i.path.relative_to(here))
            for i in items
            if i.path.relative_to(here).parts[0] not in TIERS
        }
    )
    if outside:
        raise pytest.UsageError(
            f"tests outside a tier folder ({', '.join(TIERS)}): {', '.join(outside)}"
        )
