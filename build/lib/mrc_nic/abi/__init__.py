"""The C ABI of the BPF programs in Python.

defs: layouts, constants and enums generated from bpf/*.h; cheader reads the
headers; generate writes defs (make abi).
"""
