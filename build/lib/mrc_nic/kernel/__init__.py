"""Kernel interfaces with no mrc-nic policy in them.

bpf(2) through ctypes, pinned maps, XDP attach, network namespaces, CPU time.
"""
