"""Helpers the test files share; none of them is a test file.

env: paths, the CLI runner, lab names and why a tier cannot run here.
header_probe: a C header compiled by bcc, for the layout and constant tests.
nicprog: the NIC program loaded for a test module, the golden tests' plan, and small
  helpers of its tests.
receiver: the receive QP of the NIC golden tests and its packets (test_nic_rx.py,
  test_nic_reverse.py).
switchprog: the switch port program loaded for a test module, tc verdicts, key 0.
wire_tables: which scapy fields make up each wire struct; the function-like macros.
engine: the send engine's test setup (tests/bpf/test_nic_engine.py, test_nic_mtu.py).
fake_snapshot: stats snapshots without a lab.
verbspair: a verbs QP pair between two hosts of a lab (the lab tests of applications).
"""
