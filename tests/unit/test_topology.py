"""Topology files: loading, derived names, addresses, port ids, routes, errors.

Tier 1: pure Python, no root, no namespaces, no BPF.
"""

from __future__ import annotations

import ipaddress
import string
from pathlib import Path

import pytest

from mrc_nic.lab.topology import (
    FORWARDING_DEFAULT,
    FORWARDING_MODES,
    QUEUE_BYTES_MAX,
    QueueParams,
    TopologyError,
    load,
    with_forwarding,
)
from mrc_nic.units import format_rate, parse_rate, parse_size, parse_threshold
from tests.helpers.env import NETNS_DIR

IP = ipaddress.IPv4Address
NET = ipaddress.IPv4Network
IFACE = ipaddress.IPv4Interface


@pytest.fixture(scope="module")
def default():
    return load(NETNS_DIR / "default.toml")


@pytest.fixture(scope="module")
def single():
    return load(NETNS_DIR / "single-plane.toml")


@pytest.fixture(scope="module")
def clos8():
    return load(NETNS_DIR / "clos-8.toml")


def write(tmp_path: Path, text: str, name: str = "topo.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ---- the shipped files ---------------------------------------------------------
SHIPPED = [
    # file, lab, hosts, planes, tiers, t0, t1, hosts_per_t0, nodes, links, rate
    ("default.toml", "default", 2, 4, 2, 2, 2, 1, 18, 24, "200mbit"),
    ("default-1g.toml", "default1g", 2, 4, 2, 2, 2, 1, 18, 24, "1gbit"),
    ("single-plane.toml", "singleplane", 2, 1, 1, 1, 0, 2, 3, 2, "800mbit"),
    ("clos-8.toml", "clos8", 8, 8, 2, 4, 2, 2, 56, 128, "10mbit"),
    ("clos-8-1g.toml", "clos81g", 8, 8, 2, 4, 2, 2, 56, 128, "1gbit"),
    ("scale-32x8.toml", "scale32x8", 32, 8, 2, 8, 4, 4, 128, 512, "2mbit"),
]


@pytest.mark.parametrize(
    "fname, lab, hosts, planes, tiers, t0, t1, per_t0, n_nodes, n_links, rate",
    SHIPPED,
    ids=[s[0] for s in SHIPPED],
)
def test_shipped_file_counts(
    fname, lab, hosts, planes, tiers, t0, t1, per_t0, n_nodes, n_links, rate
):
    topo = load(NETNS_DIR / fname)
    assert topo.lab == lab
    assert (topo.hosts, topo.planes, topo.tiers) == (hosts, planes, tiers)
    assert (topo.t0_per_plane, topo.t1_per_plane, topo.hosts_per_t0) == (t0, t1, per_t0)
    assert len(topo.nodes) == n_nodes
    assert len(topo.links) == n_links
    host_links = [lk for lk in topo.links.values() if lk.kind == "host"]
    fabric_links = [lk for lk in topo.links.values() if lk.kind == "fabric"]
    assert len(host_links) == hosts * planes
    assert len(fabric_links) == planes * t0 * t1
    assert sorted(topo.host_names()) == sorted(f"h{h}" for h in range(hosts))
    assert len(topo.switch_names()) == planes * (t0 + t1)
    # the faithful rates (README, "Which rates are faithful") and the 1 Gbit/s variants
    assert topo.rate_bps == topo.fabric_rate_bps == parse_rate(rate)
    assert topo.mtu == 3200  # 3 KiB per data packet
    assert topo.buffer_bytes == 256 * 1024
    assert topo.host_net == NET("198.18.0.0/16")
    assert topo.fabric_net == NET("198.19.0.0/16")
    summary = topo.summary()
    assert summary["namespaces"] == n_nodes
    assert summary["links"] == n_links
    assert summary["rate"] == rate
    assert summary["t1_per_plane"] == t1


def test_default_names(default):
    expected_nodes = {"h0", "h1"}
    expected_links = set()
    for p in range(4):
        expected_nodes |= {f"p{p}.t0a", f"p{p}.t0b", f"p{p}.t1a", f"p{p}.t1b"}
        expected_links |= {f"p{p}.t0a-h0", f"p{p}.t0b-h1"}
        expected_links |= {f"p{p}.t1{s}-t0{t}" for s in "ab" for t in "ab"}
    assert set(default.nodes) == expected_nodes
    assert set(default.links) == expected_links
    # the CLI examples' names exist
    assert "p1.t0a-h0" in default.links
    assert "p1.t1a-t0b" in default.links
    assert default.links["p1.t0a-h0"].kind == "host"
    assert default.links["p1.t1a-t0b"].kind == "fabric"


def test_node_kinds_and_planes(default):
    assert default.nodes["h0"].kind == "host"
    assert default.nodes["h0"].plane is None
    assert not default.nodes["h0"].is_switch
    t0 = default.nodes["p1.t0a"]
    assert (t0.kind, t0.plane, t0.index, t0.local_name, t0.is_switch) == ("t0", 1, 0, "t0a", True)
    t1 = default.nodes["p3.t1b"]
    assert (t1.kind, t1.plane, t1.index, t1.local_name) == ("t1", 3, 1, "t1b")


@pytest.mark.parametrize("fname", [s[0] for s in SHIPPED])
def test_namespaces(fname):
    topo = load(NETNS_DIR / fname)
    for node in topo.nodes:
        assert topo.netns(node) == f"mrc-{topo.lab}-{node}"
    assert sorted(topo.all_netns()) == sorted(f"mrc-{topo.lab}-{n}" for n in topo.nodes)
    assert len(set(topo.all_netns())) == len(topo.nodes)


@pytest.mark.parametrize("fname", [s[0] for s in SHIPPED])
def test_host_ports_and_addresses(fname):
    topo = load(NETNS_DIR / fname)
    for h in range(topo.hosts):
        host = f"h{h}"
        ports = topo.ports_of(host)
        assert sorted(p.ifname for p in ports) == sorted(f"eth{p}" for p in range(topo.planes))
        for p in range(topo.planes):
            link = topo.host_port_link(host, f"eth{p}")
            assert link.kind == "host"
            assert link.plane == p, f"{host}.eth{p} must be on plane {p}"
            assert link.lower.node == host
            assert link.lower.port_id is None  # hosts carry no switch port program
            assert link.lower.address == IFACE(f"198.18.{p}.{h + 1}/24")
            assert topo.host_address(h, p) == IP(f"198.18.{p}.{h + 1}")
            # the T0 side: the gateway /32, interface named after the host
            assert link.upper.address == IFACE(f"198.18.{p}.254/32")
            assert topo.gateway_address(p) == IP(f"198.18.{p}.254")
            assert link.upper.ifname == host
            expected_t0 = f"p{p}.t0{string.ascii_lowercase[h // topo.hosts_per_t0]}"
            assert link.upper.node == expected_t0
            assert link.name == f"p{p}.{expected_t0.split('.')[1]}-{host}"
        with pytest.raises(KeyError):
            topo.host_port_link(host, f"eth{topo.planes}")


def test_default_host_attachment(default):
    # hosts_per_t0 = 1: h0 on t0a, h1 on t0b, in every plane
    for p in range(4):
        assert default.links[f"p{p}.t0a-h0"].upper.node == f"p{p}.t0a"
        assert default.links[f"p{p}.t0b-h1"].upper.node == f"p{p}.t0b"


def test_clos8_host_attachment(clos8):
    # hosts_per_t0 = 2: h0,h1 on t0a; h2,h3 on t0b; ...; h6,h7 on t0d
    for p in range(8):
        for h in range(8):
            t0 = "abcd"[h // 2]
            assert clos8.host_port_link(f"h{h}", f"eth{p}").upper.node == f"p{p}.t0{t0}"
        for t0 in "abcd":
            hosts = {lk.lower.node for lk in clos8.links_of(f"p{p}.t0{t0}") if lk.kind == "host"}
            assert len(hosts) == 2


@pytest.mark.parametrize("fname", ["default.toml", "clos-8.toml"])
def test_fabric_addresses(fname):
    topo = load(NETNS_DIR / fname)
    seen: set[ipaddress.IPv4Network] = set()
    for lk in topo.links.values():
        if lk.kind != "fabric":
            continue
        plane_net = NET(f"198.19.{lk.plane}.0/24")
        up, low = lk.upper, lk.lower
        assert up.address.network.prefixlen == 31
        assert low.address.network.prefixlen == 31
        assert up.address.network == low.address.network
        assert up.address.ip != low.address.ip
        assert up.address.ip in plane_net and low.address.ip in plane_net
        assert up.address.network not in seen, f"{lk.name}: /31 reused"
        seen.add(up.address.network)
        # upper end is the T1, lower the T0; interfaces named after the peer
        assert topo.nodes[up.node].kind == "t1"
        assert topo.nodes[low.node].kind == "t0"
        assert topo.nodes[up.node].plane == topo.nodes[low.node].plane == lk.plane
        assert up.ifname == topo.nodes[low.node].local_name
        assert low.ifname == topo.nodes[up.node].local_name
        t1_name, t0_name = topo.nodes[up.node].local_name, topo.nodes[low.node].local_name
        assert lk.name == f"p{lk.plane}.{t1_name}-{t0_name}"


def test_default_fabric_address_example(default):
    lk = default.links["p1.t1a-t0a"]
    assert lk.upper.address == IFACE("198.19.1.0/31")
    assert lk.lower.address == IFACE("198.19.1.1/31")


@pytest.mark.parametrize("fname", [s[0] for s in SHIPPED])
def test_port_ids_unique_and_dense(fname):
    topo = load(NETNS_DIR / fname)
    ports = topo.switch_ports()
    ids = [p.port_id for p in ports]
    n_switch_ports = sum(
        1 if lk.kind == "host" else 2 for lk in topo.links.values()
    )  # a host link has one switch end, a fabric link two
    assert ids == list(range(n_switch_ports))
    for p in ports:
        assert topo.nodes[p.node].is_switch
    # every switch end of every link got an id, every host end none
    for lk in topo.links.values():
        assert lk.upper.port_id is not None
        assert (lk.lower.port_id is None) == (lk.kind == "host")


@pytest.mark.parametrize("fname", [s[0] for s in SHIPPED])
def test_interface_names_fit_ifnamsiz(fname):
    topo = load(NETNS_DIR / fname)
    for lk in topo.links.values():
        for port in lk.ends():
            assert 0 < len(port.ifname) <= 15, port


def test_switch_port_counts(default):
    # a T0 has one port per local host and one per spine; a T1 one per T0
    assert sorted(p.ifname for p in default.ports_of("p1.t0a")) == ["h0", "t1a", "t1b"]
    assert sorted(p.ifname for p in default.ports_of("p1.t1b")) == ["t0a", "t0b"]


def test_largest_topology_stays_in_its_address_blocks(tmp_path):
    path = write(
        tmp_path,
        """
        [lab]
        name = "zbig"
        [fabric]
        hosts = 253
        planes = 16
        t0_per_plane = 26
        t1_per_plane = 4
        hosts_per_t0 = 10
        """,
    )
    topo = load(path)
    assert len(topo.links) == 253 * 16 + 16 * 26 * 4
    ids = [p.port_id for p in topo.switch_ports()]
    assert ids == list(range(len(ids)))
    for lk in topo.links.values():
        net = topo.host_net if lk.kind == "host" else topo.fabric_net
        plane_net = NET((int(net.network_address) + (lk.plane << 8), 24))
        for port in lk.ends():
            assert port.address.ip in plane_net, (lk.name, port)
            assert len(port.ifname) <= 15
    assert topo.host_address(252, 15) == IP("198.18.15.253")
    # the last T0 (z) holds the 3 remaining hosts
    last = [lk for lk in topo.links_of("p0.t0z") if lk.kind == "host"]
    assert sorted(lk.lower.node for lk in last) == ["h250", "h251", "h252"]


# ---- routes --------------------------------------------------------------------
def routes_of(topo, node):
    return [r for r in topo.routes() if r.node == node]


@pytest.mark.parametrize("fname", ["default.toml", "clos-8.toml"])
def test_t0_routes(fname):
    topo = load(NETNS_DIR / fname)
    for p in range(topo.planes):
        plane_net = NET(f"198.18.{p}.0/24")
        for t0 in (n for n in topo.nodes.values() if n.kind == "t0" and n.plane == p):
            routes = routes_of(topo, t0.name)
            local = [lk for lk in topo.links_of(t0.name) if lk.kind == "host"]
            scoped = [r for r in routes if r.dev is not None]
            assert len(scoped) == len(local) == topo.hosts_per_t0
            assert {(r.dst, r.dev) for r in scoped} == {
                (NET(f"{lk.lower.address.ip}/32"), lk.upper.ifname) for lk in local
            }
            assert all(r.via == () for r in scoped)
            ecmp = [r for r in routes if r.dev is None]
            assert len(ecmp) == 1
            spines = {
                lk.upper.address.ip
                for lk in topo.links_of(t0.name)
                if lk.kind == "fabric" and lk.lower.node == t0.name
            }
            assert len(spines) == topo.t1_per_plane == 2
            assert ecmp[0].dst == plane_net
            assert len(ecmp[0].via) == 2
            assert set(ecmp[0].via) == spines
            assert all(v in NET(f"198.19.{p}.0/24") for v in ecmp[0].via)


def test_default_t0_route_example(default):
    routes = routes_of(default, "p1.t0a")
    assert (NET("198.18.1.1/32"), (), "h0") in [(r.dst, r.via, r.dev) for r in routes]
    ecmp = [r for r in routes if r.via]
    assert [(r.dst, set(r.via)) for r in ecmp] == [
        (NET("198.18.1.0/24"), {IP("198.19.1.0"), IP("198.19.1.2")})
    ]


@pytest.mark.parametrize("fname", ["default.toml", "clos-8.toml"])
def test_t1_routes(fname):
    topo = load(NETNS_DIR / fname)
    for t1 in (n for n in topo.nodes.values() if n.kind == "t1"):
        p = t1.plane
        routes = routes_of(topo, t1.name)
        assert len(routes) == topo.hosts
        by_dst = {r.dst: r for r in routes}
        assert len(by_dst) == topo.hosts
        for h in range(topo.hosts):
            host_link = topo.host_port_link(f"h{h}", f"eth{p}")
            t0 = host_link.upper.node
            down = topo.links[f"p{p}.{t1.local_name}-{topo.nodes[t0].local_name}"]
            r = by_dst[NET(f"198.18.{p}.{h + 1}/32")]
            assert r.via == (down.lower.address.ip,), f"{t1.name} -> h{h} must go via {t0}"
            assert r.dev is None


def test_default_t1_route_example(default):
    routes = {r.dst: r.via for r in routes_of(default, "p2.t1b")}
    assert routes == {
        NET("198.18.2.1/32"): (IP("198.19.2.3"),),  # h0: the t0a end of p2.t1b-t0a
        NET("198.18.2.2/32"): (IP("198.19.2.7"),),  # h1: the t0b end of p2.t1b-t0b
    }


@pytest.mark.parametrize("fname", [s[0] for s in SHIPPED])
def test_routes_only_on_switches(fname):
    topo = load(NETNS_DIR / fname)
    routes = topo.routes()
    assert routes
    assert all(topo.nodes[r.node].is_switch for r in routes)
    assert len({(r.node, r.dst) for r in routes}) == len(routes), "duplicate route"


def test_default_route_count(default):
    # per plane: each T0 one /32 + one ECMP; each T1 one /32 per host
    assert len(default.routes()) == 4 * (2 * 2 + 2 * 2)


def test_single_plane_routes(single):
    routes = single.routes()
    assert all(len(r.via) <= 1 for r in routes), "no multipath with one switch"
    assert all(r.node == "p0.t0a" for r in routes)
    assert {(r.dst, r.dev) for r in routes} == {
        (NET("198.18.0.1/32"), "h0"),
        (NET("198.18.0.2/32"), "h1"),
    }
    assert all(r.via == () for r in routes)
    assert set(single.nodes) == {"h0", "h1", "p0.t0a"}
    assert set(single.links) == {"p0.t0a-h0", "p0.t0a-h1"}
    assert all(lk.kind == "host" for lk in single.links.values())


# ---- lab names -------------------------------------------------------------------
def test_lab_override_changes_lab_and_namespaces(default):
    topo = load(NETNS_DIR / "default.toml", lab="other")
    assert topo.lab == "other"
    assert topo.netns("h0") == "mrc-other-h0"
    assert all(ns.startswith("mrc-other-") for ns in topo.all_netns())
    assert topo.summary()["lab"] == "other"
    # the rest of the lab is unchanged
    assert set(topo.links) == set(default.links)
    assert set(topo.nodes) == set(default.nodes)


def test_lab_name_defaults_to_file_stem(tmp_path):
    path = write(tmp_path, "[fabric]\nhosts = 2\nplanes = 1\ntiers = 1\n", name="my-lab2.toml")
    assert load(path).lab == "mylab2"


def test_lab_names_never_prefix_each_other():
    a = load(NETNS_DIR / "default.toml", lab="a")
    ab = load(NETNS_DIR / "default.toml", lab="ab")
    assert not any(ns.startswith("mrc-ab-") for ns in a.all_netns())
    assert not any(ns.startswith("mrc-a-") for ns in ab.all_netns())
    assert not set(a.all_netns()) & set(ab.all_netns())


def test_leftover_namespaces_only_matches_its_lab(monkeypatch):
    from mrc_nic.fabric import testbed
    from mrc_nic.kernel import netns

    a = load(NETNS_DIR / "default.toml", lab="a")
    ab = load(NETNS_DIR / "default.toml", lab="ab")
    names = sorted(a.all_netns() + ab.all_netns() + ["mrc-a-b-h0", "other"])
    monkeypatch.setattr(netns, "list_names", lambda: names)
    assert sorted(testbed.leftover_namespaces("a")) == sorted(a.all_netns())
    assert sorted(testbed.leftover_namespaces("ab")) == sorted(ab.all_netns())


GOOD_LAB_NAMES = ["a", "lab2", "abcdefghijkl", "0"]
BAD_LAB_NAMES = ["a-b", "Lab", "LAB", "abcdefghijklm", "", "a_b", "a.b", "a b", "é"]


@pytest.mark.parametrize("name", GOOD_LAB_NAMES)
def test_good_lab_names(name, tmp_path):
    assert load(NETNS_DIR / "default.toml", lab=name).lab == name
    path = write(tmp_path, f'[lab]\nname = "{name}"\n[fabric]\nhosts = 1\nplanes = 1\ntiers = 1\n')
    assert load(path).lab == name


@pytest.mark.parametrize("name", BAD_LAB_NAMES)
def test_bad_lab_name_override_refused(name):
    with pytest.raises(TopologyError) as exc:
        load(NETNS_DIR / "default.toml", lab=name)
    msg = str(exc.value)
    assert "lab.name" in msg
    assert "[a-z0-9]{1,12}" in msg
    assert repr(name) in msg


@pytest.mark.parametrize("name", BAD_LAB_NAMES)
def test_bad_lab_name_in_file_refused(name, tmp_path):
    path = write(tmp_path, f'[lab]\nname = "{name}"\n[fabric]\nhosts = 1\nplanes = 1\ntiers = 1\n')
    with pytest.raises(TopologyError) as exc:
        load(path)
    assert str(exc.value).startswith(f"{path}: lab.name: ")


def test_non_string_lab_name_refused(tmp_path):
    path = write(tmp_path, "[lab]\nname = 7\n[fabric]\nhosts = 1\nplanes = 1\ntiers = 1\n")
    with pytest.raises(TopologyError, match="lab.name"):
        load(path)


# Regression: '^...$' with re.match accepted a trailing newline ('$' matches before a
# final '\n'), so "abc\n" made namespaces "mrc-abc\n-h0".
@pytest.mark.parametrize("name", ["abc\n", "abcdefghijkl\n", "\nabc"])
def test_lab_name_with_newline_refused(name):
    with pytest.raises(TopologyError, match="lab.name"):
        load(NETNS_DIR / "default.toml", lab=name)


# ---- bad files ------------------------------------------------------------------
BASE = '[lab]\nname = "zunit"\n'

QUEUES = BASE + "[fabric]\nhosts = 2\nplanes = 1\n[queues]\n"

# id, file text, dotted key named in the message, fragments saying what is allowed
BAD_FILES = [
    (
        "unknown-section",
        BASE + "[fabric]\nhosts = 2\nplanes = 1\n[bogus]\nx = 1\n",
        "bogus",
        ["unknown section", "lab, fabric, links, nic, addressing"],
    ),
    (
        "unknown-key",
        BASE + "[fabric]\nhosts = 2\nplanes = 1\nhots = 3\n",
        "fabric.hots",
        ["unknown key", "hosts, planes, tiers, t0_per_plane, t1_per_plane, hosts_per_t0"],
    ),
    (
        "unknown-key-links",
        BASE + "[fabric]\nhosts = 2\nplanes = 1\n[links]\nspeed = '1gbit'\n",
        "links.speed",
        ["unknown key", "rate, fabric_rate, mtu, buffer"],
    ),
    (
        "section-not-table",
        'lab = "x"\n[fabric]\nhosts = 2\nplanes = 1\n',
        "lab",
        ["must be a table"],
    ),
    ("hosts-missing", BASE + "[fabric]\nplanes = 1\n", "fabric.hosts", ["required", "1..253"]),
    ("hosts-0", BASE + "[fabric]\nhosts = 0\nplanes = 1\n", "fabric.hosts", ["1..253", "got 0"]),
    ("hosts-254", BASE + "[fabric]\nhosts = 254\nplanes = 1\n", "fabric.hosts", ["1..253"]),
    (
        "hosts-float",
        BASE + "[fabric]\nhosts = 2.0\nplanes = 1\n",
        "fabric.hosts",
        ["integer", "1..253"],
    ),
    (
        "hosts-bool",
        BASE + "[fabric]\nhosts = true\nplanes = 1\n",
        "fabric.hosts",
        ["integer", "1..253"],
    ),
    (
        "hosts-string",
        BASE + '[fabric]\nhosts = "2"\nplanes = 1\n',
        "fabric.hosts",
        ["integer", "1..253"],
    ),
    ("planes-0", BASE + "[fabric]\nhosts = 2\nplanes = 0\n", "fabric.planes", ["1..16"]),
    (
        "planes-17",
        BASE + "[fabric]\nhosts = 2\nplanes = 17\n",
        "fabric.planes",
        ["1..16", "got 17"],
    ),
    (
        "tiers-3",
        BASE + "[fabric]\nhosts = 2\nplanes = 1\ntiers = 3\n",
        "fabric.tiers",
        ["1..2", "got 3"],
    ),
    (
        "t1-with-one-tier",
        BASE + "[fabric]\nhosts = 2\nplanes = 1\ntiers = 1\nt1_per_plane = 2\n",
        "fabric.t1_per_plane",
        ["only allowed with tiers = 2"],
    ),
    (
        "two-t0-with-one-tier",
        BASE + "[fabric]\nhosts = 2\nplanes = 1\ntiers = 1\nt0_per_plane = 2\n",
        "fabric.t0_per_plane",
        ["1..1"],
    ),
    (
        "t0-27",
        BASE + "[fabric]\nhosts = 30\nplanes = 1\nt0_per_plane = 27\n",
        "fabric.t0_per_plane",
        ["1..26"],
    ),
    (
        "too-many-fabric-links",
        BASE + "[fabric]\nhosts = 24\nplanes = 1\nt0_per_plane = 12\nt1_per_plane = 11\n",
        "fabric",
        ["at most 128"],
    ),
    (
        "hosts-per-t0-too-small",
        BASE + "[fabric]\nhosts = 4\nplanes = 1\nt0_per_plane = 2\nhosts_per_t0 = 1\n",
        "fabric.hosts_per_t0",
        ["cannot hold 4 hosts", "raise it to 2"],
    ),
    (
        "hosts-per-t0-leaves-t0-empty",
        BASE + "[fabric]\nhosts = 4\nplanes = 1\nt0_per_plane = 4\nhosts_per_t0 = 2\n",
        "fabric.hosts_per_t0",
        ["no host", "lower hosts_per_t0"],
    ),
    (
        "rate-fast",
        BASE + '[fabric]\nhosts = 2\nplanes = 1\n[links]\nrate = "fast"\n',
        "links.rate",
        ["'fast'", "kbit, mbit, gbit", '"none"'],
    ),
    (
        "rate-100gbit",
        BASE + '[fabric]\nhosts = 2\nplanes = 1\n[links]\nrate = "100gbit"\n',
        "links.rate",
        ["100kbit", "32gbit", '"none"'],
    ),
    (
        "rate-tiny",
        BASE + '[fabric]\nhosts = 2\nplanes = 1\n[links]\nrate = "10kbit"\n',
        "links.rate",
        ["100kbit", "32gbit"],
    ),
    (
        "fabric-rate-bad",
        BASE + '[fabric]\nhosts = 2\nplanes = 1\n[links]\nfabric_rate = "1 gigabit"\n',
        "links.fabric_rate",
        ["gbit"],
    ),
    (
        "mtu-1100",
        BASE + "[fabric]\nhosts = 2\nplanes = 1\n[links]\nmtu = 1100\n",
        "links.mtu",
        ["1104..3506", "got 1100", "1024 bytes of payload"],
    ),
    (
        "mtu-3507",
        BASE + "[fabric]\nhosts = 2\nplanes = 1\n[links]\nmtu = 3507\n",
        "links.mtu",
        ["1104..3506", "got 3507", "XDP"],
    ),
    (
        "buffer-parsecs",
        BASE + '[fabric]\nhosts = 2\nplanes = 1\n[links]\nbuffer = "12 parsecs"\n',
        "links.buffer",
        ["'12 parsecs'", "kib, mib"],
    ),
    (
        "buffer-too-small",
        BASE + '[fabric]\nhosts = 2\nplanes = 1\n[links]\nbuffer = "1KiB"\n',
        "links.buffer",
        ["between 16384 and 67108864 bytes", "got 1024"],
    ),
    (
        "hosts-net-24",
        BASE + '[fabric]\nhosts = 2\nplanes = 1\n[addressing]\nhosts = "198.18.0.0/24"\n',
        "addressing.hosts",
        ["/16 or larger", "got /24"],
    ),
    (
        "hosts-net-garbage",
        BASE + '[fabric]\nhosts = 2\nplanes = 1\n[addressing]\nhosts = "banana"\n',
        "addressing.hosts",
        ["IPv4 network like '198.18.0.0/16'", "'banana'"],
    ),
    (
        "fabric-net-host-bits",
        BASE + '[fabric]\nhosts = 2\nplanes = 1\n[addressing]\nfabric = "198.19.1.0/16"\n',
        "addressing.fabric",
        ["IPv4 network like '198.19.0.0/16'"],
    ),
    (
        "nets-overlap",
        BASE
        + '[fabric]\nhosts = 2\nplanes = 1\n[addressing]\nhosts = "10.0.0.0/16"\n'
        + 'fabric = "10.0.0.0/8"\n',
        "addressing",
        ["10.0.0.0/16", "10.0.0.0/8", "overlap"],
    ),
    (
        "queues-unknown-key",
        QUEUES + "kmn = 0.2\n",
        "queues.kmn",
        ["unknown key", "base_rtt, ecn, ecn_last_hop, kmin, kmax, trim, seed"],
    ),
    ("queues-ecn-string", QUEUES + 'ecn = "yes"\n', "queues.ecn", ["true or false", "'yes'"]),
    (
        "queues-kmin-garbage",
        QUEUES + 'kmin = "lots"\n',
        "queues.kmin",
        ["'lots'", "fraction of the BDP", '"20KB"'],
    ),
    (
        "queues-kmax-bytes-without-unit",
        QUEUES + "kmax = 80000\n",
        "queues.kmax",
        ["0..1000", "a size needs a unit"],
    ),
    (
        "queues-kmin-above-kmax",
        QUEUES + 'kmin = 0.9\nkmax = "5KB"\n',
        "queues.kmin",
        ["11250 bytes is above kmax (5000 bytes)", "on 1gbit links (BDP 12500 bytes)"],
    ),
    (
        "queues-trim-too-big",
        QUEUES + 'base_rtt = "1s"\ntrim = 100.0\n',
        "queues.trim",
        ["12500000000 bytes on 1gbit links", "at most 1073741824"],
    ),
    ("queues-rtt-no-unit", QUEUES + 'base_rtt = "100"\n', "queues.base_rtt", ["ns, us, ms, s"]),
    ("queues-rtt-too-long", QUEUES + 'base_rtt = "2s"\n', "queues.base_rtt", ["1us..1s"]),
    ("queues-seed-negative", QUEUES + "seed = -1\n", "queues.seed", ["0..2^63-1"]),
]


@pytest.mark.parametrize(
    "text, key, fragments", [b[1:] for b in BAD_FILES], ids=[b[0] for b in BAD_FILES]
)
def test_bad_file_names_file_and_key(tmp_path, text, key, fragments):
    path = write(tmp_path, text)
    with pytest.raises(TopologyError) as exc:
        load(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: {key}: "), msg
    for fragment in fragments:
        assert fragment in msg, f"{fragment!r} not in {msg!r}"
    assert "\n" not in msg, "the CLI prints it as one line"


def test_invalid_toml(tmp_path):
    path = write(tmp_path, "[fabric\nhosts = 2\n")
    with pytest.raises(TopologyError) as exc:
        load(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: not valid TOML: ")
    assert "line 1" in msg
    assert "\n" not in msg


def test_missing_file(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(TopologyError) as exc:
        load(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: ")
    assert "no such topology file" in msg
    assert "netns/" in msg


def test_topology_error_is_a_value_error():
    # the CLI turns ValueErrors into one line; TopologyError must be one of them
    assert issubclass(TopologyError, ValueError)


def test_minimal_file_uses_defaults(tmp_path):
    path = write(tmp_path, BASE + "[fabric]\nhosts = 4\nplanes = 2\n")
    topo = load(path)
    assert (topo.tiers, topo.t0_per_plane, topo.t1_per_plane) == (2, 2, 2)
    assert topo.hosts_per_t0 == 2  # spread over the 2 T0s
    assert topo.rate_bps == topo.fabric_rate_bps == 10**9
    assert topo.mtu == 1500
    assert topo.buffer_bytes == 262144
    assert topo.host_net == NET("198.18.0.0/16")
    assert topo.fabric_net == NET("198.19.0.0/16")


def test_queues_section_defaults_and_values(tmp_path):
    topo = load(write(tmp_path, BASE + "[fabric]\nhosts = 2\nplanes = 1\n"))
    assert topo.queues == QueueParams()
    assert topo.queues.bdp_bytes(10**9) == 12500  # 1 Gbit/s x 100 us
    path = write(
        tmp_path,
        QUEUES
        + 'base_rtt = "20us"\necn = false\necn_last_hop = true\nkmin = "1k"\n'
        + 'kmax = "0.5bdp"\ntrim = "off"\nseed = 3\n',
    )
    q = load(path).queues
    assert (q.base_rtt_ns, q.ecn, q.ecn_last_hop, q.trim, q.seed) == (20_000, False, True, None, 3)
    assert (q.kmin.resolve(q.bdp_bytes(10**9)), q.kmax.resolve(2500)) == (1000, 1250)


def test_fabric_rate_defaults_to_rate(tmp_path):
    path = write(tmp_path, BASE + '[fabric]\nhosts = 2\nplanes = 1\n[links]\nrate = "400mbit"\n')
    topo = load(path)
    assert topo.rate_bps == topo.fabric_rate_bps == 400 * 10**6
    assert all(lk.rate_bps == 400 * 10**6 for lk in topo.links.values())


def test_rate_none_and_separate_fabric_rate(tmp_path):
    path = write(
        tmp_path,
        BASE + '[fabric]\nhosts = 2\nplanes = 1\n[links]\nrate = "none"\nfabric_rate = "2gbit"\n',
    )
    topo = load(path)
    assert topo.rate_bps is None
    assert topo.fabric_rate_bps == 2 * 10**9
    for lk in topo.links.values():
        assert lk.rate_bps == (None if lk.kind == "host" else 2 * 10**9)
    assert topo.summary()["rate"] == "none"


def test_other_address_blocks(tmp_path):
    path = write(
        tmp_path,
        BASE
        + '[fabric]\nhosts = 2\nplanes = 2\n[addressing]\nhosts = "10.1.0.0/16"\n'
        + 'fabric = "10.2.0.0/16"\n',
    )
    topo = load(path)
    assert topo.host_port_link("h1", "eth1").lower.address == IFACE("10.1.1.2/24")
    assert topo.gateway_address(1) == IP("10.1.1.254")
    assert topo.links["p1.t1a-t0a"].upper.address == IFACE("10.2.1.0/31")


# ---- parse_rate / parse_size / format_rate ----------------------------------
@pytest.mark.parametrize(
    "text, bps",
    [
        ("1gbit", 10**9),
        ("400mbit", 400 * 10**6),
        ("100kbit", 10**5),
        ("1tbit", 10**12),
        ("5000bit", 5000),
        ("1.5gbit", 1_500_000_000),
        ("2.5mbit", 2_500_000),
        (" 10 Mbit ", 10**7),
        ("1GBIT", 10**9),
        (5000, 5000),
        ("none", None),
        ("None", None),
        ("unlimited", None),
        ("0", None),
        (0, None),
    ],
)
def test_parse_rate(text, bps):
    assert parse_rate(text) == bps


@pytest.mark.parametrize(
    "bad", ["fast", "10", "1 gigabit", "gbit", "", "1.gbit", "-1gbit", 1.5, True]
)
def test_parse_rate_errors(bad):
    with pytest.raises(ValueError) as exc:
        parse_rate(bad)
    assert "gbit" in str(exc.value)


@pytest.mark.parametrize(
    "bps, text",
    [
        (None, "none"),
        (10**9, "1gbit"),
        (1_500_000_000, "1500mbit"),
        (10**5, "100kbit"),
        (2 * 10**12, "2tbit"),
        (1234, "1234bit"),
        (1_000_001, "1000001bit"),
    ],
)
def test_format_rate(bps, text):
    assert format_rate(bps) == text


@pytest.mark.parametrize(
    "bps", [None, 1, 999, 10**5, 123_456, 10**9, 1_500_000_000, 32 * 10**9, 7 * 10**12]
)
def test_rate_round_trip_from_number(bps):
    assert parse_rate(format_rate(bps)) == bps


@pytest.mark.parametrize("text", ["1gbit", "400mbit", "100kbit", "3tbit", "1234bit", "none"])
def test_rate_round_trip_from_text(text):
    assert format_rate(parse_rate(text)) == text


# Regression: int() truncated float(number) * unit, so "4.1mbit" was 4099999 bits/s
# (4.1 * 10**6 == 4099999.9999999995) and printed back as "4099999bit".
@pytest.mark.parametrize(
    "text, bps",
    [
        ("4.1mbit", 4_100_000),
        ("8.2mbit", 8_200_000),
        ("1.005mbit", 1_005_000),
        ("2.01kbit", 2_010),
        ("32.3kbit", 32_300),
    ],
)
def test_parse_rate_decimal_fraction_is_exact(text, bps):
    assert parse_rate(text) == bps
    assert parse_rate(format_rate(bps)) == bps


@pytest.mark.parametrize(
    "text, size",
    [
        ("256KiB", 256 * 1024),
        ("1MiB", 2**20),
        ("64MiB", 64 * 2**20),
        ("64kb", 64_000),
        ("2MB", 2_000_000),
        ("4096", 4096),
        ("4096b", 4096),
        ("16 KiB", 16 * 1024),
        (" 16kib ", 16 * 1024),
        (4096, 4096),
    ],
)
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize(
    "text, size",
    [
        ("1.5MiB", 3 * 2**19),
        ("2TiB", 2 * 2**40),
        ("2tib", 2 * 2**40),
        ("2 TB", 2 * 10**12),
        ("1GiB", 2**30),
        ("0.5kb", 500),
    ],
)
def test_parse_size_large_units_and_fractions(text, size):
    assert parse_size(text) == size


def test_parse_size_fraction_is_exact_or_refused():
    # 1.1 GiB is not a whole number of bytes (1181116006.4): refused, never rounded
    with pytest.raises(ValueError, match="whole number of bytes"):
        parse_size("1.1GiB")
    assert parse_size("1.25GiB") == 5 * 2**28  # exact in binary and decimal alike


@pytest.mark.parametrize(
    "bad", ["12 parsecs", "KiB", "", "-5", "5 5", "1.", ".5k", 1.5, True, None]
)
def test_parse_size_errors(bad):
    with pytest.raises(ValueError) as exc:
        parse_size(bad)
    assert "KiB" in str(exc.value) or "kib" in str(exc.value)


def test_queue_threshold_over_the_limit_states_it():
    with pytest.raises(ValueError, match="over the limit of 1 GiB"):
        parse_threshold("2G")
    assert parse_threshold("1GiB").nbytes == QUEUE_BYTES_MAX


@pytest.mark.parametrize(
    "rate, ok", [("32gbit", True), ("33gbit", False), ("100kbit", True), ("99kbit", False)]
)
def test_rate_bounds(tmp_path, rate, ok):
    # the bounds the message states ("between 100kbit and 32gbit") are the ones enforced
    path = write(tmp_path, BASE + f'[fabric]\nhosts = 2\nplanes = 1\n[links]\nrate = "{rate}"\n')
    if ok:
        assert load(path).rate_bps == parse_rate(rate)
    else:
        with pytest.raises(TopologyError, match="between 100kbit and 32gbit"):
            load(path)


# ---- [nic] memory ---------------------------------------------------------------------


def test_nic_memory_per_host_is_the_topologys(tmp_path):
    base = BASE + "[fabric]\nhosts = 2\nplanes = 1\n"
    path = tmp_path / "t.toml"
    path.write_text(base)
    assert load(path).nic_memory_bytes == 64 * 2**20  # the default
    path.write_text(base + '[nic]\nmemory = "320MiB"\n')
    assert load(path).nic_memory_bytes == 320 * 2**20
    for value, words in (('"1048577"', "whole pages"), ('"2GiB"', "between")):
        path.write_text(base + f"[nic]\nmemory = {value}\n")
        with pytest.raises(TopologyError, match=words) as e:
            load(path)
        assert "nic.memory" in str(e.value)


def test_many_hosts_share_a_gib_of_nic_memory_by_default(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text(BASE + "[fabric]\nhosts = 64\nplanes = 1\ntiers = 1\n")
    assert load(path).nic_memory_bytes == 2**30 // 64


# ---- transfer sizes (mrc-nic write --size, the benchmarks) ---------------------------


@pytest.mark.parametrize(
    "text, size",
    [
        ("1G", 2**30),
        ("1T", 2**40),
        ("1TiB", 2**40),
        ("1tib", 2**40),
        ("1.5G", 3 * 2**29),
        ("64K", 2**16),
        ("1GB", 10**9),
        ("4096", 4096),
    ],
)
def test_write_size_units(text, size):
    from mrc_nic.workloads.rdma_write import parse_size as write_size

    assert write_size(text) == size


@pytest.mark.parametrize("text", ["2T", "2TiB", "2tib", "1.5T", "1100GB"])
def test_write_size_over_the_limit_states_the_limit(text):
    from mrc_nic.workloads.rdma_write import parse_size as write_size

    with pytest.raises(ValueError, match=r"over the limit of 1 TiB per transfer"):
        write_size(text)


def test_write_size_zero_is_refused():
    from mrc_nic.workloads.rdma_write import parse_size as write_size

    with pytest.raises(ValueError, match="at least 1 byte"):
        write_size("0")


# ---- who forwards in the switches ----------------------------------------------------
def test_forwarding_defaults_and_choices(tmp_path):
    base = "[fabric]\nhosts = 2\nplanes = 1\n"
    assert load(write(tmp_path, base)).forwarding == FORWARDING_DEFAULT
    for mode in FORWARDING_MODES:
        assert load(write(tmp_path, base + f'forwarding = "{mode}"\n')).forwarding == mode
    with pytest.raises(TopologyError, match=r"fabric\.forwarding: must be one of bpf, kernel"):
        load(write(tmp_path, base + 'forwarding = "xdp"\n'))


def test_with_forwarding_keeps_the_rest_and_records_it(default):
    for mode in FORWARDING_MODES:
        topo = with_forwarding(default, mode, lab="other")
        assert (topo.forwarding, topo.lab) == (mode, "other")
        assert topo.raw["fabric"]["forwarding"] == mode
        assert set(topo.links) == set(default.links)
    assert "forwarding" not in default.raw["fabric"], "the original is not changed"
