"""What runs on a lab.

Test traffic, WRITE transfers, scenarios, the ring collective, kernel peers.
"""
