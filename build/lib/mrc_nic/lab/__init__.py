"""A lab as a record: what it is, what exists of it, how to reach its services.

Its topology, its state on disk and lock, the services' sockets and processes.
"""
