"""One lab over several machines (docs/cluster.md).

Ray places one agent per machine (agent); placement cuts the lab into shards
at T0-T1 links (placement), each agent builds its shard with the fabric's own
builder, cross-machine links being VXLAN devices (shard); the CLI
(mrc_nic.cli.cluster_lab) reaches the agent that owns a command's target
through machines. This package sits below the CLI: it imports the fabric and
the lab, never the CLI.
"""
