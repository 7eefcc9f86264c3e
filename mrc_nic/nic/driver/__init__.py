"""The user-space driver of the emulated NIC: what a process that posts and
polls uses, with the record formats of the generated ABI (mrc_nic.abi).

- formats: struct.Structs of a WQE, the send queue's head and a completion
  record, built from the ABI's layouts (checked field by field by a test);
- sq: SendQueue, the WQE writer over one QP's slot of the mapped nic_wq;
- doorbell: kicks (run_kick: BPF_PROG_RUN on a kick frame) and an
  application QP's doorbell (frames into the host's doorbell port);
- cq: CqRing, a completion queue's ring buffer, created and read here;
- views: DeviceMaps, the narrow face of the lab's NIC maps an application
  gets (its queues, rings, memory windows and its own QPs' state).

mrc_nic.verbs is built on this; so are NicMaps.post_write and kick (the
daemon's transfers, the BPF tests). The native library (mrc_nic/native)
is the same driver in C, on the same bpf/ headers (docs/api.md, "C programs").
"""

from mrc_nic.nic.driver.cq import CqRing
from mrc_nic.nic.driver.sq import SendQueue

__all__ = ["CqRing", "SendQueue"]
