"""What a lab shows.

Counter snapshots, rates, the live view, Prometheus text, captures, the event log.
"""
