"""The OCP controller objects (transport.profiles): lifecycle, expansion, validation."""

from __future__ import annotations

import errno

import pytest

from mrc_nic.transport import profiles as P
from mrc_nic.transport.profiles import EvField, EvFmtField, ProfileError, ProfileTable


def _fmt(t: ProfileTable, pid: int = 1, widths=(8, 8), mode="UDP") -> None:
    t.modify_ev_fmt(
        pid, {"profile_state": "OFFLINE", "ev_fmt_mode": mode, "fmt_fields": list(widths)}
    )
    t.modify_ev_fmt(pid, {"profile_state": "ONLINE"})


def _refused(code: int, match: str, fn, *args):
    with pytest.raises(ProfileError, match=match) as e:
        fn(*args)
    assert e.value.errno == code
    return e


def test_expansion_follows_the_ocp_example():
    # examples/ev_expansion "Generated w/ Fixed" in 8-bit fields: init 0x10 / 0x20,
    # 4 EV bits each in the low nibble; the EV's high nibble goes to field 0.
    fields = [EvField(8, 0x10, 1, 15, 0x0F), EvField(8, 0x20, 1, 15, 0x0F)]
    assert P.expand(0xAB, fields, [EvFmtField(8)] * 2) == 0x1A2B
    # a "weird" mask: EV bits land on the mask's set bits, lowest first
    assert EvField(8, 0, 0, 3, 0b1010).overlay(0b11) == 0b1010
    assert EvField(8, 0, 0, 3, 0b1010).overlay(0b01) == 0b0010
    # a format field wider than the EV field is zero-filled on top
    assert P.expand(0x5, [EvField(4, 0, 0, 15, 0xF)], [EvFmtField(8), EvFmtField(8)]) == 0x0500
    with pytest.raises(ProfileError, match="beyond the profile's 8 EV bits"):
        P.expand(0x1FF, fields, [EvFmtField(8)] * 2)


def test_field_restrictions_are_checked():
    for bad, match in (
        ({"width": 4, "init_val": 0x10}, "wider than its 4 bits"),
        ({"width": 4, "mask": 0x10}, "outside its 4 bits"),
        ({"width": 8, "mask": 0x3, "max_val": 4}, "wider than its mask's 2 bits"),
        ({"width": 8, "colour": 1}, "no EV field attribute 'colour'"),
    ):
        _refused(errno.EINVAL, match, EvField.of, bad)


def test_ev_format_profile_lifecycle_and_limits():
    t = ProfileTable(planes=4)
    _refused(errno.EINVAL, "needs ev_fmt_mode", t.modify_ev_fmt, 1, {"profile_state": "OFFLINE"})
    _refused(errno.EINVAL, "INIT -> ONLINE is not a step", t.modify_ev_fmt, 1,
             {"profile_state": "ONLINE", "ev_fmt_mode": "UDP", "fmt_fields": [16]})  # fmt: skip
    _refused(errno.E2BIG, "at most 16 bits", t.modify_ev_fmt, 1,
             {"ev_fmt_mode": "STEV", "fmt_fields": [16, 16]})  # fmt: skip
    _refused(errno.EINVAL, "SRV6 is not supported", t.modify_ev_fmt, 1, {"ev_fmt_mode": "SRV6"})
    _fmt(t)
    assert t.fmt[1].state == P.ProfileState.ONLINE
    _refused(errno.EBUSY, "is ONLINE", t.modify_ev_fmt, 1, {"fmt_fields": [4]})


def test_generated_profile_makes_distinct_wire_evs_on_every_port():
    t = ProfileTable(planes=4)
    _fmt(t)
    fields = [
        {"width": 8, "init_val": 0x40, "min_val": 0, "max_val": 0, "mask": 0},  # fixed
        {"width": 8, "min_val": 1, "max_val": 200, "mask": 0xFF},
    ]
    p = t.modify_ev(5, {"profile_state": "OFFLINE", "ev_mode": "GEN", "ev_fmt_profile_id": 1,
                        "ev_count": 16, "ev_min_active": 4, "fields": fields})  # fmt: skip
    t.modify_ev(5, {"profile_state": "ONLINE"})
    evs = p.qp_evs(t.fmt[1], 4)
    assert len(evs) == 16
    assert all(0x4001 <= w <= 0x40C8 for w in evs)  # the fixed field is the high byte
    assert sorted(evs.values()) == sorted([0, 1, 2, 3] * 4)  # ports in turn
    assert len(p.backup) == 200 - 16  # the rest of the space: replacements
    w = p.next_backup(t.fmt[1], 2, set(evs))
    assert w not in evs and 0x4001 <= w <= 0x40C8
    # another profile with the same fields sprays differently (seeded by id)
    t.modify_ev(6, {"profile_state": "OFFLINE", "ev_mode": "GEN", "ev_fmt_profile_id": 1,
                    "ev_count": 16, "fields": fields})  # fmt: skip
    assert [e.val for e in t.ev[6].evs] != [e.val for e in p.evs]
    too_many = {"profile_state": "OFFLINE", "ev_mode": "GEN", "ev_fmt_profile_id": 1,
                "ev_count": 256, "fields": [{"width": 4, "max_val": 15, "mask": 0xF}]}  # fmt: skip
    _refused(errno.E2BIG, "fewer than ev_count 256", t.modify_ev, 7, too_many)
    assert 7 not in t.ev  # a refused call changes nothing


def test_explicit_profile_is_populated_by_replace_before_online():
    t = ProfileTable(planes=2)
    _fmt(t, widths=(16,))
    t.modify_ev(3, {"profile_state": "OFFLINE", "ev_mode": "EXP", "ev_fmt_profile_id": 1,
                    "ev_count": 2, "fields": [{"width": 16, "mask": 0xFFFF}]})  # fmt: skip
    _refused(errno.EINVAL, "2 of its 2 EVs are unpopulated", t.modify_ev, 3,
             {"profile_state": "ONLINE"})  # fmt: skip
    entries = [{"ev": P.UNPOPULATED.as_dict(), "ev_new": {"val": 4000 + i, "port": i + 1}}
               for i in range(2)]  # fmt: skip
    t.modify_ev(3, {"ev_op": {"op": "REPLACE_EV", "entries": entries}})
    _refused(
        errno.EINVAL,
        "ports are 1..2",
        t.modify_ev,
        3,
        {
            "ev_op": {
                "op": "REPLACE_EV",
                "entries": [{"ev": {"val": 4000, "port": 1}, "ev_new": {"val": 9, "port": 3}}],
            }
        },
    )
    t.modify_ev(3, {"profile_state": "ONLINE"})
    assert t.ev[3].qp_evs(t.fmt[1], 2) == {4000: 0, 4001: 1}
    # MODIFY_EV_STATE on an ONLINE profile; ASSUMED_BAD is the NIC's to set
    t.modify_ev(
        3,
        {
            "ev_op": {
                "op": "MODIFY_EV_STATE",
                "entries": [{"ev": {"val": 4001, "port": 2}, "state": "DENIED"}],
            }
        },
    )
    assert t.ev[3].denied_wire(t.fmt[1]) == {4001}
    _refused(
        errno.EINVAL,
        "sets DENIED or GOOD",
        t.modify_ev,
        3,
        {
            "ev_op": {
                "op": "MODIFY_EV_STATE",
                "entries": [{"ev": {"val": 4001}, "state": "ASSUMED_BAD"}],
            }
        },
    )
    # ONLINE -> OFFLINE is EBUSY while a QP uses it
    t.attach(0x10001, 3, None)
    _refused(errno.EBUSY, "used by QP", t.modify_ev, 3, {"profile_state": "OFFLINE"})
    t.detach(0x10001)
    t.modify_ev(3, {"profile_state": "OFFLINE"})
    _refused(errno.EINVAL, "is OFFLINE: a QP takes an ONLINE profile", t.online_ev_profile, 3)


def test_profile_zero_is_auto_and_only_takes_the_event_mask():
    t = ProfileTable(planes=4)
    p, fmt = t.online_ev_profile(0)
    assert p.mode == P.EvMode.AUTO and fmt is None
    assert p.qp_evs(None, 4, 8) == {49152 + i: i % 4 for i in range(8)}
    _refused(
        errno.EINVAL,
        "only takes ev_event_mask, ev_op and probe_good",
        t.modify_ev,
        0,
        {"ev_count": 4},
    )
    t.modify_ev(0, {"ev_event_mask": ["ASSUMED_BAD"]})
    assert t.ev[0].ev_event_mask == P.EvState.ASSUMED_BAD
    _refused(errno.EINVAL, "GOOD and ASSUMED_BAD only", t.modify_ev, 0, {"ev_event_mask": 4})
    _refused(errno.ENOENT, "no EV profile 9", t.online_ev_profile, 9)


def test_probe_good_is_an_ev_profile_attribute_with_a_default():
    t = ProfileTable(planes=4)
    assert t.probe_good(None) == t.probe_good(0) == P.DEFAULT_PROBE_GOOD == 3
    t.modify_ev(0, {"probe_good": 5})
    assert t.probe_good(0) == 5 and t.ev[0].as_dict()["probe_good"] == 5
    assert t.probe_good(7) == P.DEFAULT_PROBE_GOOD  # no such profile: the default
    _refused(errno.EINVAL, "probe_good", t.modify_ev, 0, {"probe_good": 0})


def test_cc_profiles_name_nscc_as_ocp_does_and_follow_the_lifecycle():
    t = ProfileTable(planes=4)
    assert t.cc[1].algorithm == "uet-1.0-nscc" and t.cc[0].algorithm is None
    _refused(errno.EINVAL, "built in", t.modify_cc, 1, {"cc_config": {}})
    _refused(errno.EINVAL, "needs algorithm", t.modify_cc, 7, {"profile_state": "OFFLINE"})
    _refused(errno.EINVAL, "algorithm must be one of uet-1.0-nscc", t.modify_cc, 7,
             {"algorithm": "dcqcn"})  # fmt: skip
    t.modify_cc(7, {"profile_state": "OFFLINE", "algorithm": "uet-1.0-nscc"})
    _refused(errno.EINVAL, "needs cc_config", t.modify_cc, 7, {"profile_state": "ONLINE"})
    _refused(errno.EINVAL, "is OFFLINE", t.nscc_config, 7)
    _refused(errno.EINVAL, "no NSCC field 'alpha'", t.modify_cc, 7, {"cc_config": {"alpha": 1}})
    t.modify_cc(7, {"profile_state": "ONLINE", "cc_config": {"max_cwnd": 65536, "gamma": 0.5}})
    cfg = t.nscc_config(7)
    assert (cfg.max_cwnd, cfg.gamma, cfg.eta) == (65536, 0.5, 0.15)
    _refused(errno.EBUSY, "is ONLINE", t.modify_cc, 7, {"cc_config": {"gamma": 0.7}})
    t.modify_cc(8, {"profile_state": "OFFLINE", "algorithm": None})
    t.modify_cc(8, {"profile_state": "ONLINE", "cc_config": None})
    assert t.nscc_config(8) is None  # no CC: a fixed window


def test_device_attr_says_what_this_nic_supports():
    a = ProfileTable(planes=4).device_attr()
    assert a["ev"]["ev_max_width"] == 16 and a["ev"]["ev_max_count_profile"] == 256
    assert a["ev"]["ev_fmt_mode_mask"] == ["STEV", "UDP"]
    assert a["cc"]["algorithms"] == ["uet-1.0-nscc"]
    assert a["phy_port_mask"] == 0b11110  # ports 1..4
