"""The MRC transport's control plane.

The host daemon: QPs and their timeouts, NSCC, probes, EV replacement.
"""
