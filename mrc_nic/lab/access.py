"""Who may reach a lab's host daemons: root, and the members of the lab's group.

As the rdma group and the modes of /dev/infiniband say who may open a
machine's RDMA devices, a lab's topology file may name a group (`[tenants]
group = "mrc-nic"`) whose members open the lab's NICs without root. Without
it the NICs are root's alone. Two walls, both on the kernel's word:
- each host daemon's socket, /run/mrc-nic/<lab>/<host>.sock (lab.service):
  root:GROUP, 0660 (root's alone, 0600, without a group);
- the daemon (transport.tenancy): an application's session (app_hello) only
  from root or a member of the group (SO_PEERCRED and the peer's groups), and
  operator operations only from root.
The lab's run directory, /run/mrc-nic/<lab>, and its parent are searchable
by anyone (state.make_lab_dir), as they are by default; the lab's event log
socket and lock files stay root's whatever the setting.
"""

from __future__ import annotations

import grp

from mrc_nic.contract.devices import group_name, join_hint, refusal, user_name
from mrc_nic.errors import MrcNicError
from mrc_nic.lab.topology import Topology

__all__ = ["NoSuchGroup", "group_id", "group_name", "join_hint", "refusal", "user_name"]


class NoSuchGroup(MrcNicError, LookupError):
    """The lab's [tenants] group does not exist on this machine."""


def group_id(topo: Topology) -> int | None:
    """The gid of the lab's [tenants] group (None: root only); NoSuchGroup,
    naming it and how to make it, when this machine has no such group."""
    name = topo.tenant_group
    if name is None:
        return None
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise NoSuchGroup(
            f"{topo.path}: tenants.group: there is no group {name!r} on this machine: "
            f"create it with `groupadd {name}` and add who may open lab {topo.lab}'s NICs "
            f"(`usermod -aG {name} USER`), or leave the setting out for root only"
        ) from None
