"""One lab over several machines (docs/cluster.md).

Ray places one agent per machine (agent); placement cuts the lab into shards
at T0-T1 links (placement), each agent builds its shard with the fabric's own
builder, cross-machine links being VXLAN devices; the CLI reaches the agent
that owns a command's target (machines, commands). This package sits between
the CLI and the fabric: it imports mrc_nic.fabric and mrc_nic.lab, never the CLI.
"""
