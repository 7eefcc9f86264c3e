"""The benchmark scripts (scripts/*.py) import: each one's main is there and
--help answers, without root and without running anything; and the shared
harness (mrc_nic.workloads.benchkit) they import from.

A broken import in a script (a module moved, a name renamed) fails here
rather than at the start of a benchmark run.
"""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys

import pytest

from mrc_nic import resources
from mrc_nic.workloads import benchkit
from tests.helpers.env import ROOT

SCRIPTS = sorted((ROOT / "scripts").glob("*.py"))


def load_script(path, monkeypatch):
    """The script as a module (its `if __name__ == "__main__"` block not run),
    in sys.modules for the test only (dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_every_bench_script_is_found():
    names = {p.stem for p in SCRIPTS}
    assert {"bench", "bench_all", "bench_failover", "bench_msgsize", "bench_collective"} <= names


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_script_imports_and_has_main(path, monkeypatch):
    module = load_script(path, monkeypatch)
    assert callable(module.main)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_script_help_runs(path, tmp_path):
    # From another directory, with only the package on the path: the script
    # must find what it imports through the package, not through its folder.
    proc = subprocess.run(
        [sys.executable, str(path), "--help"],
        cwd=tmp_path,
        env=resources.python_path_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_script_does_not_edit_sys_path(path):
    text = path.read_text()
    assert "sys.path" not in text
    assert "noqa: E402" not in text


# ---- the harness ---------------------------------------------------------------------
def test_table_row_ratio_and_values():
    r = benchkit.table_row("b", "c", "m", "s", 2.0, "TCP", 3.0, ratio_is="peer/mrc")
    assert r["ratio"] == 1.5 and r["ratio_is"] == "peer/mrc"
    r = benchkit.table_row("b", "c", "m", "Gbit/s", 3.14159, "TCP", 0.0)
    assert r["mrc"] == 3.142 and r["ratio"] is None
    assert benchkit.table_row("b", "c", "m", "", float("inf"), "p", 1.0)["mrc"] is None
    assert set(r) == set(benchkit.ROW_KEYS)
    with pytest.raises(ValueError):
        benchkit.ratio_of(1.0, 2.0, "mrc-peer")


def test_check_result_follows_the_convention():
    row = benchkit.table_row("b", "c", "m", "s", 1.0, "p", 2.0)
    good = {**benchkit.run_header("scripts/bench.py", ["--quick"]), "table": [row]}
    json.loads(json.dumps(good))  # what a script writes is JSON
    assert benchkit.check_result(good, "x") == [row]
    assert good["command"] == ".venv/bin/python scripts/bench.py --quick"
    with pytest.raises(benchkit.BenchError, match="no top-level key 'table'"):
        benchkit.check_result({k: v for k, v in good.items() if k != "table"}, "x")
    with pytest.raises(benchkit.BenchError, match="ratio_is"):
        benchkit.check_result({**good, "table": [{**row, "ratio_is": "x"}]}, "x")


def test_print_table_aligns_cells():
    rows = [
        benchkit.table_row("goodput", "4 planes", "aggregate", "Gbit/s", 3.9, "MPTCP", 3.1),
        benchkit.table_row("loss", "1%", "goodput", "Gbit/s", None, "MPTCP", 2.0),
    ]
    buf = io.StringIO()
    benchkit.print_table(rows, file=buf)
    head, first, second = buf.getvalue().splitlines()
    assert head.split() == ["benchmark", "case", "mrc-nic", "peer", "ratio", "target"]
    assert "3.9 Gbit/s" in first and "1.26 (mrc/peer)" in first
    assert second.startswith("loss") and " - " in second


def test_small_helpers():
    assert benchkit.median([None, 3.0, 1.0, None, 2.0]) == 2.0
    assert benchkit.median([None]) is None
    assert benchkit.ratio(1.0, 3.0) == 0.333
    assert benchkit.ratio(None, 3.0) is None and benchkit.ratio(1.0, 0) is None
    assert benchkit.verdict(None).startswith("unknown") and benchkit.verdict(False) == "NOT MET"
    assert benchkit.default_out(ROOT / "scripts" / "bench.py") == ROOT / "out" / "bench"
    assert benchkit.rel(ROOT / "netns" / "default.toml", ROOT) == "netns/default.toml"


def test_profile_netcpu_reads_perf_script_stacks(monkeypatch):
    mod = load_script(ROOT / "scripts" / "profile_netcpu.py", monkeypatch)
    text = (
        "     ksoftirqd/0 [000] 100.0001: \n"
        "\t ffffffff81000001 veth_poll\n\t ffffffff81000002 net_rx_action\n"
        "\t ffffffff81000003 run_ksoftirqd\n\n"
        "          python [001] 100.0002: \n"
        "\t ffffffff81000004 veth_xmit\n\t ffffffff81000002 net_rx_action\n"
        "\t ffffffff81000005 __irq_exit_rcu\n\n"
        "          python [001] 100.0031: \n\t 7f0000000001 _PyEval_EvalFrameDefault\n\n"
    )
    samples = mod.parse_perf_script(text)
    assert [(cpu, comm) for cpu, _, comm, _ in samples] == [
        (0, "ksoftirqd/0"),
        (1, "python"),
        (1, "python"),
    ]
    a = mod.analyse(samples)
    assert a["net_samples"] == 2
    assert a["net_share_per_cpu"] == {0: 1.0, 1: 0.5}
    assert (a["bins_with_net_work"], a["bins_all_cpus_net"]) == (1, 1)  # both CPUs in 100.000 s
    assert a["contexts"] == {"ksoftirqd": 0.5, "interrupt exit": 0.5}


def test_results_go_whole_to_docs_and_only_targets_to_the_readme(monkeypatch):
    bench_all = load_script(ROOT / "scripts" / "bench_all.py", monkeypatch)
    rows = [
        benchkit.table_row("goodput", "4 planes", "goodput", "Gbit/s", 0.96, "MPTCP", 0.94),
        benchkit.table_row(
            "goodput", "4 planes", "ratio", "", 0.97, "links", 1.0, target=">= 0.95: met"
        ),
    ]
    data = {
        "started": "2026-11-27T10:00:00",
        "machine": {"cpus": 2, "kernel": "6.18", "load_avg": [0.5]},
        "command": ".venv/bin/python scripts/bench.py --quick",
        "table": rows,
    }
    results = [(bench_all.Bench("bench", 60), data)]
    full = bench_all.results_markdown(results)
    assert full.count("scripts/bench.py --quick") == 1  # the command once, above its rows
    assert "| 4 planes: goodput | 0.96 Gbit/s | MPTCP 0.94 Gbit/s |" in full
    summary = bench_all.summary_markdown(results)
    assert ">= 0.95: met | 2026-11-27 |" in summary
    assert "4 planes: goodput |" not in summary  # no target: only in docs/results.md
    section = bench_all.replace_readme_section(
        f"top\n{bench_all.MARK_START}\nold\n{bench_all.MARK_END}\nrest", summary
    )
    assert section.startswith("top\n") and section.endswith(f"{bench_all.MARK_END}\nrest")
    assert "old" not in section
