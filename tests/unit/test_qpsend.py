"""transport.qpsend: how long a suspected EV may stay silent before it is blamed."""

from __future__ import annotations

from mrc_nic.kernel import pins
from mrc_nic.transport import qpsend


def test_silence_is_the_timeout_or_a_few_reorder_windows_whichever_is_shorter():
    timeout_s = 1.024e-6 * 2**12  # 4.19 ms
    # a fast lab: 250 us windows, blamed after 1 ms of silence
    assert qpsend.silent_ns(timeout_s, 250_000) == 4 * 250_000
    # 1.1 ms windows: four of them are longer than the timeout
    assert qpsend.silent_ns(timeout_s, 1_100_000) == round(timeout_s * 1e9)
    # the head scan off (reorder 0): the timeout alone
    assert qpsend.silent_ns(timeout_s, 0) == round(timeout_s * 1e9)
    # a timeout past what struct nic_sq.silent_ns holds
    assert qpsend.silent_ns(1.024e-6 * 2**24, 0) == pins.U32_MAX
