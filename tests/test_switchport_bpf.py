"""Golden-packet tests of bpf/switch_port.c through BPF_PROG_TEST_RUN.

The program is compiled once for the module (lab ``ztest<pid>``, pins removed
at teardown). BPF_PROG_TEST_RUN cannot set skb->tc_classid, so every test
packet runs as key 0 (port 0, ingress); each test reads counter deltas and
starts with no fault on that key. The decoding of other keys (classid ->
port_id * 2 + direction) is covered by the netns test at the end, which
attaches the program to a real veth pair.

Keys >= MAX_PORT_KEYS cannot be produced here either: switch_port() returns
TC_ACT_OK before touching any map when key >= MAX_PORT_KEYS (read the C).
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import math
import os
import subprocess
import time
from typing import Any

import pytest
from conftest import compile_header_probe, compiled_constants, require_root_and_bcc, struct_layout
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from mrc_nic import bpfsys
from mrc_nic import switchport as sp


def needs_bpf(test):
    """Mark a test that loads BPF (root + bpf); pure-Python tests stay unmarked."""
    return pytest.mark.root(pytest.mark.bpf(test))


TC_ACT_OK = 0
TC_ACT_SHOT = 2
MAX_PORTS = 4  # keys 0..7
LAB = f"ztest{os.getpid()}"


def udp_packet(payload_len: int = 64) -> bytes:
    frame = (
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src="10.0.0.1", dst="10.0.0.2")
        / UDP(sport=49152, dport=4791)
        / Raw(bytes(range(256)) * (payload_len // 256) + bytes(payload_len % 256))
    )
    return bytes(frame)


UDP_64 = udp_packet(64)
UDP_1500 = udp_packet(1500 - 28)  # 1500-byte IP packet, 1514-byte frame
ETH_ONLY = bytes(14)  # the smallest frame BPF_PROG_TEST_RUN accepts


# ---- fixtures -------------------------------------------------------------------


@pytest.fixture(scope="module")
def program():
    require_root_and_bcc()
    prog = sp.SwitchPortProgram.load(LAB, MAX_PORTS)
    try:
        yield prog
    finally:
        prog.close()
        sp.unpin(LAB)


@pytest.fixture(scope="module")
def maps(program):
    with sp.SwitchPortMaps.open(LAB) as m:
        yield m


@pytest.fixture(autouse=True)
def no_fault_on_key0(request):
    # Only tests that use the maps need a clean key 0.
    if "maps" in request.fixturenames:
        m = request.getfixturevalue("maps")
        m.clear_fault(0, sp.INGRESS)
    yield


def run(program, data: bytes, repeat: int = 1) -> bpfsys.TestRunResult:
    return bpfsys.prog_test_run(program.fd, data, repeat=repeat)


def counters0(maps) -> sp.PortCounters:
    return maps.counters(0, sp.INGRESS)


def delta(before: sp.PortCounters, after: sp.PortCounters) -> dict[str, int]:
    return {k: v - before.as_dict()[k] for k, v in after.as_dict().items()}


def verdicts(program, count: int, data: bytes = UDP_64) -> list[bool]:
    """Run count packets one by one; True where the program dropped it."""
    return [run(program, data).retval == TC_ACT_SHOT for _ in range(count)]


# ---- golden packets, table-driven ----------------------------------------------------


def _expired() -> dict[str, Any]:
    return {"mode": sp.FaultMode.BLACKHOLE, "until_ns": time.monotonic_ns() - 1}


def _future() -> dict[str, Any]:
    return {"mode": sp.FaultMode.BLACKHOLE, "until_ns": time.monotonic_ns() + 600 * 10**9}


@dataclasses.dataclass
class Case:
    name: str
    fault: Any  # dict of set_fault kwargs, a callable making one, or None
    packet: bytes
    repeat: int
    retval: int
    counted: dict[str, int]  # expected counter deltas; missing names must stay 0


def passed(n: int, pkt: bytes) -> dict[str, int]:
    size = n * len(pkt)
    return {"pkts": n, "bytes": size, "passed_pkts": n, "passed_bytes": size}


def dropped(n: int, pkt: bytes, reason: str) -> dict[str, int]:
    return {"pkts": n, "bytes": n * len(pkt), reason: n}


BLACKHOLE = {"mode": sp.FaultMode.BLACKHOLE}
CASES = [
    Case("no fault", None, UDP_64, 1, TC_ACT_OK, passed(1, UDP_64)),
    Case("no fault, full-size frame", None, UDP_1500, 1, TC_ACT_OK, passed(1, UDP_1500)),
    Case("no fault, bare Ethernet header", None, ETH_ONLY, 1, TC_ACT_OK, passed(1, ETH_ONLY)),
    Case("mode NONE", {"mode": sp.FaultMode.NONE}, UDP_64, 1, TC_ACT_OK, passed(1, UDP_64)),
    Case("blackhole", BLACKHOLE, UDP_64, 1, TC_ACT_SHOT, dropped(1, UDP_64, "drop_blackhole")),
    Case(
        "blackhole, bare Ethernet header",
        BLACKHOLE,
        ETH_ONLY,
        1,
        TC_ACT_SHOT,
        dropped(1, ETH_ONLY, "drop_blackhole"),
    ),
    Case(
        "blackhole x100",
        BLACKHOLE,
        UDP_64,
        100,
        TC_ACT_SHOT,
        dropped(100, UDP_64, "drop_blackhole"),
    ),
    Case("blackhole, expired", _expired, UDP_64, 1, TC_ACT_OK, passed(1, UDP_64)),
    Case(
        "blackhole, expires later",
        _future,
        UDP_64,
        1,
        TC_ACT_SHOT,
        dropped(1, UDP_64, "drop_blackhole"),
    ),
    Case(
        "loss 0 never drops",
        {"mode": sp.FaultMode.LOSS, "loss_rate": 0.0, "seed": 1},
        UDP_64,
        5000,
        TC_ACT_OK,
        passed(5000, UDP_64),
    ),
    Case(
        "loss 1 always drops",
        {"mode": sp.FaultMode.LOSS, "loss_rate": 1.0, "seed": 1},
        UDP_64,
        5000,
        TC_ACT_SHOT,
        dropped(5000, UDP_64, "drop_loss"),
    ),
    Case(
        "loss 1, bare Ethernet header",
        {"mode": sp.FaultMode.LOSS, "loss_rate": 1.0},
        ETH_ONLY,
        1,
        TC_ACT_SHOT,
        dropped(1, ETH_ONLY, "drop_loss"),
    ),
    Case(
        "loss 1, expired",
        lambda: {"mode": sp.FaultMode.LOSS, "loss_rate": 1.0, "until_ns": time.monotonic_ns() - 1},
        UDP_64,
        10,
        TC_ACT_OK,
        passed(10, UDP_64),
    ),
]


@needs_bpf
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden_packet(program, maps, case: Case):
    if case.fault is not None:
        fault = case.fault() if callable(case.fault) else case.fault
        maps.set_fault(0, sp.INGRESS, **fault)
    before = counters0(maps)

    result = run(program, case.packet, repeat=case.repeat)

    assert result.retval == case.retval
    if case.retval == TC_ACT_OK:
        assert result.data_out == case.packet, "the program must not modify packets"
    expected = dict.fromkeys(before.as_dict(), 0) | case.counted
    assert delta(before, counters0(maps)) == expected


@needs_bpf
def test_counters_add_up(program, maps):
    maps.set_fault(0, sp.INGRESS, sp.FaultMode.LOSS, loss_rate=0.5, seed=3)
    run(program, UDP_64, repeat=1000)
    c = counters0(maps)
    assert c.pkts == c.passed_pkts + c.drop_blackhole + c.drop_loss


@needs_bpf
def test_clear_fault_restores_forwarding(program, maps):
    maps.set_fault(0, sp.INGRESS, sp.FaultMode.BLACKHOLE, fault_id=7)
    assert run(program, UDP_64).retval == TC_ACT_SHOT
    maps.clear_fault(0, sp.INGRESS)
    assert run(program, UDP_64).retval == TC_ACT_OK
    assert maps.fault(0, sp.INGRESS)["mode"] == "NONE"


@needs_bpf
def test_frame_shorter_than_ethernet_is_refused_by_kernel(program):
    # BPF_PROG_TEST_RUN refuses frames under 14 bytes; bpfsys must say what failed.
    with pytest.raises(OSError, match="BPF_PROG_TEST_RUN") as info:
        run(program, bytes(13))
    assert info.value.errno == errno.EINVAL


# ---- LOSS: rate and reproducibility ---------------------------------------------------


@needs_bpf
@pytest.mark.parametrize("seed", [0, 1, 0xDEADBEEF])
def test_loss_rate_matches_within_binomial_tolerance(program, maps, seed):
    # Drops of n packets at rate p are Binomial(n, p) if the hash is unbiased:
    # sd = sqrt(n p (1-p)) = 56.6 packets (0.28%) for n = 20000, p = 0.2. A
    # 5-sd band fails by chance with probability < 1e-6 (and the outcome is
    # deterministic for a given seed, so a pass is stable).
    n, p = 20000, 0.2
    maps.set_fault(0, sp.INGRESS, sp.FaultMode.LOSS, loss_rate=p, seed=seed)
    before = counters0(maps)

    run(program, UDP_64, repeat=n)

    got = delta(before, counters0(maps))
    tolerance = 5 * math.sqrt(n * p * (1 - p))
    assert abs(got["drop_loss"] - n * p) <= tolerance
    assert got["drop_loss"] + got["passed_pkts"] == n


@needs_bpf
def test_same_seed_replays_same_drops(program, maps):
    maps.set_fault(0, sp.INGRESS, sp.FaultMode.LOSS, loss_rate=0.3, seed=42)
    first = verdicts(program, 400)
    maps.set_fault(0, sp.INGRESS, sp.FaultMode.LOSS, loss_rate=0.3, seed=42)  # resets n
    second = verdicts(program, 400)

    assert first == second
    assert 0 < sum(first) < 400


@needs_bpf
def test_different_seeds_give_different_drops(program, maps):
    patterns = {}
    for seed in (42, 43, 1 << 40):
        maps.set_fault(0, sp.INGRESS, sp.FaultMode.LOSS, loss_rate=0.3, seed=seed)
        patterns[seed] = verdicts(program, 400)
    assert patterns[42] != patterns[43]
    assert patterns[42] != patterns[1 << 40]
    assert patterns[43] != patterns[1 << 40]


# ---- the map client -----------------------------------------------------------------


@needs_bpf
def test_fault_reports_configuration(maps):
    until = time.monotonic_ns() + 10**12
    maps.set_fault(
        1, sp.EGRESS, sp.FaultMode.LOSS, loss_rate=0.2, seed=99, until_ns=until, fault_id=12
    )
    try:
        assert maps.fault(1, sp.EGRESS) == {
            "mode": "LOSS",
            "loss_rate": 0.2,
            "seed": 99,
            "until_ns": until,
            "fault_id": 12,
            "expired": False,
        }
        assert maps.fault(1, sp.INGRESS)["mode"] == "NONE"
    finally:
        maps.clear_fault(1, sp.EGRESS)
    assert maps.fault(1, sp.EGRESS)["mode"] == "NONE"


@needs_bpf
@pytest.mark.parametrize("rate", [-0.01, 1.01, float("nan"), float("inf"), "0.5", None])
def test_set_fault_rejects_bad_loss_rate(maps, rate):
    with pytest.raises(ValueError, match="loss_rate"):
        maps.set_fault(0, sp.INGRESS, sp.FaultMode.LOSS, loss_rate=rate)
    assert maps.fault(0, sp.INGRESS)["mode"] == "NONE", "a rejected fault must not be written"


@needs_bpf
def test_set_fault_rejects_out_of_range_values(maps):
    with pytest.raises(ValueError, match="seed"):
        maps.set_fault(0, sp.INGRESS, sp.FaultMode.LOSS, seed=-1)
    with pytest.raises(ValueError, match="fault_id"):
        maps.set_fault(0, sp.INGRESS, sp.FaultMode.BLACKHOLE, fault_id=1 << 32)
    with pytest.raises(ValueError):
        maps.set_fault(0, sp.INGRESS, 9)
    with pytest.raises(ValueError, match="direction"):
        maps.set_fault(0, 2, sp.FaultMode.BLACKHOLE)
    with pytest.raises(ValueError, match="out of range"):
        maps.set_fault(MAX_PORTS, sp.INGRESS, sp.FaultMode.BLACKHOLE)
    with pytest.raises(ValueError, match="out of range"):
        maps.counters(MAX_PORTS, sp.EGRESS)


@pytest.mark.root
def test_open_missing_lab_names_path():
    lab = f"zmissing{os.getpid()}"
    with pytest.raises(FileNotFoundError, match="is the lab up") as info:
        sp.SwitchPortMaps.open(lab)
    assert str(sp.pin_dir(lab)) in str(info.value)


def test_lab_names_are_checked():
    for bad in ("", "Lab", "a/b", "..", "a-b"):
        with pytest.raises(ValueError, match="lab name"):
            sp.pin_dir(bad)


@needs_bpf
def test_load_refuses_existing_pins(program):
    with pytest.raises(FileExistsError, match="already pinned"):
        sp.SwitchPortProgram.load(LAB, MAX_PORTS)


def test_unpin_absent_lab_is_quiet():
    sp.unpin(f"zabsent{os.getpid()}")


@needs_bpf
def test_pinned_maps_have_expected_shape(program):
    expected = {
        sp.FAULTS_MAP: (bpfsys.BPF_MAP_TYPE_ARRAY, ctypes.sizeof(sp.FaultConfig)),
        sp.COUNTERS_MAP: (bpfsys.BPF_MAP_TYPE_PERCPU_ARRAY, ctypes.sizeof(sp.CountersLayout)),
    }
    for name, (map_type, value_size) in expected.items():
        fd = bpfsys.obj_get(sp.pin_dir(LAB) / name)
        try:
            info = bpfsys.map_info(fd)
        finally:
            os.close(fd)
        assert (info.type, info.key_size, info.value_size) == (map_type, 4, value_size)
        assert info.max_entries == MAX_PORTS * 2  # -DMAX_PORT_KEYS reached the program
        assert info.name == name


@needs_bpf
def test_percpu_values_round_trip(program, maps):
    # Key 7 (port 3 egress) sees no test-run traffic: write distinct values per CPU.
    fd = bpfsys.obj_get(sp.pin_dir(LAB) / sp.COUNTERS_MAP)
    key = sp.port_key(3, sp.EGRESS).to_bytes(4, "little")
    size = ctypes.sizeof(sp.CountersLayout)
    try:
        cpus = bpfsys.possible_cpus()
        values = [bytes(sp.CountersLayout(pkts=cpu + 1, drop_loss=10)) for cpu in range(cpus)]
        bpfsys.map_update_percpu(fd, key, values)
        assert bpfsys.map_lookup_percpu(fd, key, size) == values
        got = maps.counters(3, sp.EGRESS)
        assert (got.pkts, got.drop_loss) == (cpus * (cpus + 1) // 2, 10 * cpus)
        bpfsys.map_update_percpu(fd, key, [bytes(size)] * cpus)
        assert maps.counters(3, sp.EGRESS) == sp.PortCounters()
    finally:
        os.close(fd)


def test_loss_threshold_scale():
    assert sp.loss_threshold(0) == 0
    assert sp.loss_threshold(0.5) == 1 << 31
    assert sp.loss_threshold(1) == 1 << 32  # above every 32-bit hash: always drops


def test_parse_cpu_list():
    assert bpfsys.parse_cpu_list("0-3,5,7-8\n") == [0, 1, 2, 3, 5, 7, 8]
    assert bpfsys.parse_cpu_list("0") == [0]


@pytest.mark.root
def test_obj_get_error_names_path():
    with pytest.raises(FileNotFoundError, match="BPF_OBJ_GET /sys/fs/bpf/zsp-nothing-here"):
        bpfsys.obj_get("/sys/fs/bpf/zsp-nothing-here")


# ---- layouts and constants against the header --------------------------------------------


@needs_bpf
@pytest.mark.parametrize(
    ("map_name", "python_view"),
    [(sp.FAULTS_MAP, sp.FaultConfig), (sp.COUNTERS_MAP, sp.CountersLayout)],
)
def test_python_layout_matches_compiled_struct(program, map_name, python_view):
    table = program.bpf[map_name.encode()]
    # bcc's per-CPU tables expose an array of per-CPU values as Leaf; sLeaf is one value.
    compiled = getattr(table, "sLeaf", table.Leaf)
    assert ctypes.sizeof(python_view) == ctypes.sizeof(compiled)
    assert struct_layout(python_view) == struct_layout(compiled)


def test_port_counters_fields_follow_the_struct():
    names = [f.name for f in dataclasses.fields(sp.PortCounters)]
    assert names == [name for name, _ in sp.CountersLayout._fields_]


# Every constant Python copies from switch_port.h, as (C expression, Python value).
HEADER_CONSTANTS = [
    ("SP_DIR_INGRESS", sp.INGRESS),
    ("SP_DIR_EGRESS", sp.EGRESS),
    ("SP_DIRECTIONS", sp.DIRECTIONS),
    ("SP_FAULT_NONE", sp.FaultMode.NONE),
    ("SP_FAULT_BLACKHOLE", sp.FaultMode.BLACKHOLE),
    ("SP_FAULT_LOSS", sp.FaultMode.LOSS),
    ("SP_LOSS_SCALE_SHIFT", sp.LOSS_SCALE_SHIFT),
]


@needs_bpf
def test_constants_match_header(program):
    probe = compile_header_probe("switch_port.h", sp.BPF_DIR, (), HEADER_CONSTANTS)
    try:
        got = compiled_constants(probe, HEADER_CONSTANTS)
    finally:
        probe.cleanup()
    assert got == {expr: int(value) for expr, value in HEADER_CONSTANTS}
    assert set(sp.FaultMode) == {sp.FaultMode.NONE, sp.FaultMode.BLACKHOLE, sp.FaultMode.LOSS}


# ---- real ports: classid decoding on a veth pair ----------------------------------------------


@needs_bpf
@pytest.mark.netns
def test_attach_decodes_port_and_direction(program, maps):
    """Ping across a veth pair whose ends are ports 3 (side a) and 1 (side b).

    Each direction of each port must count on its own key, port 0 and 2 must
    see nothing, and a blackhole on port 3 egress must stop the pings.
    """
    from pyroute2 import IPRoute, netns

    ns_a, ns_b = f"zsp-{os.getpid()}a", f"zsp-{os.getpid()}b"
    port_a, port_b = 3, 1
    made = []
    try:
        for name in (ns_a, ns_b):
            netns.create(name)
            made.append(name)
        with IPRoute(netns=ns_a) as ipa, IPRoute(netns=ns_b) as ipb:
            ipa.link("add", ifname="zspa", kind="veth", peer={"ifname": "zspb", "net_ns_fd": ns_b})
            idx_a = ipa.link_lookup(ifname="zspa")[0]
            idx_b = ipb.link_lookup(ifname="zspb")[0]
            ipa.addr("add", index=idx_a, address="198.18.250.1", prefixlen=24)
            ipb.addr("add", index=idx_b, address="198.18.250.2", prefixlen=24)
            ipa.link("set", index=idx_a, state="up")
            ipb.link("set", index=idx_b, state="up")
            program.attach(ipa, idx_a, port_a)
            program.attach(ipb, idx_b, port_b)
            before = {(p, d): maps.counters(p, d) for p in range(MAX_PORTS) for d in (0, 1)}

            assert _ping(ns_a, "198.18.250.2", count=3) == 0
            after = {k: maps.counters(*k) for k in before}
            seen = {k: after[k].pkts - before[k].pkts for k in before}
            for key in [
                (port_a, sp.EGRESS),
                (port_b, sp.INGRESS),
                (port_b, sp.EGRESS),
                (port_a, sp.INGRESS),
            ]:
                assert seen[key] >= 3, (key, seen)
            for port in (0, 2):
                for direction in (sp.INGRESS, sp.EGRESS):
                    if port == 0 and direction == sp.INGRESS:
                        continue  # key 0 is shared with the test-run tests
                    assert seen[(port, direction)] == 0, (port, direction, seen)

            maps.set_fault(port_a, sp.EGRESS, sp.FaultMode.BLACKHOLE)
            try:
                assert _ping(ns_a, "198.18.250.2", count=2) != 0
                assert maps.counters(port_a, sp.EGRESS).drop_blackhole >= 2
            finally:
                maps.clear_fault(port_a, sp.EGRESS)
    finally:
        for name in made:
            netns.remove(name)


def _ping(ns: str, address: str, count: int) -> int:
    cmd = [
        "ip",
        "netns",
        "exec",
        ns,
        "ping",
        "-q",
        "-c",
        str(count),
        "-i",
        "0.2",
        "-W",
        "1",
        address,
    ]
    return subprocess.run(cmd, capture_output=True, timeout=30).returncode
