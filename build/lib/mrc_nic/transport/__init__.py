"""The MRC transport's control plane.

The host daemon: QPs, send jobs, NSCC, probes, EV replacement.
"""
