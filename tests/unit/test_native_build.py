"""The native verbs library (mrc_nic/native) builds and exports what an
unmodified verbs program binds to: libibverbs' calls under libibverbs.so.1's
symbol versions, and the OCP mrc.h API."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mrc_nic import native

# What perftest and OCP's mrc_example call, with libibverbs.so.1's versions.
NEEDED = {
    "ibv_get_device_list": "IBVERBS_1.1",
    "ibv_open_device": "IBVERBS_1.1",
    "ibv_query_port": "IBVERBS_1.1",
    "ibv_reg_mr": "IBVERBS_1.1",
    "ibv_reg_mr_iova2": "IBVERBS_1.8",
    "_ibv_query_gid_ex": "IBVERBS_1.11",
    "ibv_create_comp_channel": "IBVERBS_1.0",
    "ibv_wc_status_str": "IBVERBS_1.1",
    "mrc_create_qp": "MRC_1.0",
    "mrc_post_send": "MRC_1.0",
}


@pytest.fixture(scope="module")
def exported() -> dict[str, str]:
    if shutil.which("cc") is None or not Path("/usr/include/infiniband/verbs.h").exists():
        pytest.skip("needs cc and libibverbs-dev (scripts/setup installs them)")
    if shutil.which("readelf") is None:
        pytest.skip("needs readelf (binutils)")
    lib = native.library()
    out = subprocess.run(
        ["readelf", "--dyn-syms", "-W", str(lib)], capture_output=True, text=True, check=True
    ).stdout
    symbols = {}
    for match in re.finditer(r"\sFUNC\s+GLOBAL\s+DEFAULT\s+\d+\s+(\w+)@@?(\S+)", out):
        symbols[match.group(1)] = match.group(2)
    return symbols


def test_the_library_exports_the_calls_under_libibverbs_versions(exported):
    assert {name: exported.get(name) for name in NEEDED} == NEEDED


def test_nothing_else_is_exported(exported):
    """Internals stay local: a program's own symbols are never shadowed."""
    assert all(name.startswith(("ibv_", "_ibv_", "mrc_")) for name in exported), exported


def test_lib_mrc_so_is_the_same_library_beside_it():
    if shutil.which("cc") is None or not Path("/usr/include/infiniband/verbs.h").exists():
        pytest.skip("needs cc and libibverbs-dev (scripts/setup installs them)")
    lib = native.library()
    assert (lib.parent / "lib_mrc.so").resolve() == lib.resolve()
    assert (native.include_dir() / "mrc.h").exists()


# What the native library reads and writes in shared memory, and its doorbell's
# limits: compiled from its own header (native.h, which includes bpf/'s), printed,
# and compared with the Python driver's (mrc_nic.nic.driver). The two drivers
# share the bpf/ headers; this keeps them from drifting apart anywhere else.
_LAYOUT_PROBE = r"""
#include <stdio.h>
#include <stddef.h>
#include "native.h"
#define F(s, f) printf(#s "." #f " %zu %zu\n", offsetof(struct s, f), sizeof(((struct s *)0)->f))
#define S(s) printf(#s " %zu\n", sizeof(struct s))
#define C(n) printf(#n " %lld\n", (long long)(n))
int main(void)
{
	S(nic_wqe); S(nic_wq); S(nic_kick); S(nic_event); S(nic_send_event); S(nic_qp_err_event);
	F(nic_wqe, wr_id); F(nic_wqe, remote_va); F(nic_wqe, rkey); F(nic_wqe, len);
	F(nic_wqe, src_region); F(nic_wqe, src_off); F(nic_wqe, imm); F(nic_wqe, opcode);
	F(nic_wqe, flags); F(nic_wq, posted); F(nic_wq, done); F(nic_wq, wqes);
	F(nic_kick, qpn); F(nic_kick, op); F(nic_kick, arg); F(nic_kick, age_ns);
	F(nic_event, type); F(nic_event, qpn); F(nic_event, msn); F(nic_event, imm);
	F(nic_event, len); F(nic_event, ts); F(nic_send_event, wqe); F(nic_send_event, ts);
	F(nic_qp_err_event, syndrome); F(nic_qp_err_event, error);
	C(NV_DOORBELL_FRAMES_MAX); C(NV_LIVE_BATCH_MAX); C(NIC_KICK_ETHERTYPE);
	C(BPF_RINGBUF_BUSY_BIT); C(BPF_RINGBUF_DISCARD_BIT); C(BPF_RINGBUF_HDR_SZ);
	return 0;
}
"""


def test_the_native_library_shares_the_python_drivers_formats(tmp_path):
    if shutil.which("cc") is None or not Path("/usr/include/infiniband/verbs.h").exists():
        pytest.skip("needs cc and libibverbs-dev (scripts/setup installs them)")
    import ctypes

    from mrc_nic import nic, resources
    from mrc_nic.nic import events
    from mrc_nic.nic.driver import doorbell, formats

    (tmp_path / "probe.c").write_text(_LAYOUT_PROBE)
    exe = tmp_path / "probe"
    subprocess.run(
        ["cc", "-std=gnu11", f"-I{resources.BPF_DIR}", f"-I{native.SOURCE_DIR / 'src'}",
         f"-I{native.include_dir()}", "-o", str(exe), str(tmp_path / "probe.c")],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    got = {}
    for line in subprocess.run([str(exe)], capture_output=True, text=True).stdout.splitlines():
        name, *numbers = line.split()
        got[name] = tuple(int(n) for n in numbers)
    layouts = {
        "nic_wqe": nic.Wqe, "nic_wq": nic.Wq, "nic_kick": nic.Kick, "nic_event": nic.Event,
        "nic_send_event": nic.SendEvent, "nic_qp_err_event": nic.QpErrEvent,
    }  # fmt: skip
    want = {}
    for cname, layout in layouts.items():
        want[cname] = (ctypes.sizeof(layout),)
        for field, _ in layout._fields_:
            if f"{cname}.{field}" in got:
                f = getattr(layout, field)
                want[f"{cname}.{field}"] = (f.offset, f.size)
    want |= {
        "NV_DOORBELL_FRAMES_MAX": (doorbell.DOORBELL_FRAMES_MAX,),
        "NV_LIVE_BATCH_MAX": (doorbell.LIVE_BATCH_MAX,),
        "NIC_KICK_ETHERTYPE": (doorbell.KICK_ETHERTYPE,),
        "BPF_RINGBUF_BUSY_BIT": (events._RINGBUF_BUSY,),
        "BPF_RINGBUF_DISCARD_BIT": (events._RINGBUF_DISCARD,),
        "BPF_RINGBUF_HDR_SZ": (events._RINGBUF_HDR,),
    }
    assert got == want
    # and the Python driver's precompiled structs are those layouts (tests/unit/test_driver.py)
    assert got["nic_wqe"] == (formats.WQE.size,) and got["nic_event"] == (formats.CQE.size,)
