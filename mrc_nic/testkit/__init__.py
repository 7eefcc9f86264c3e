"""Test support shipped with the package: nothing of mrc-nic's own runs on it.

transfer: one RDMA WRITE through the NIC fast path with no daemon (fixed QP
numbers and regions the daemons never hand out: transport.hostmem), for the
tests and the benchmarks of the bare NIC (scripts/bench_fastpath.py).
"""
