"""The emulated fabric.

Namespaces and links (builder), the switch port program, queues, faults, and up/down (testbed).
"""
