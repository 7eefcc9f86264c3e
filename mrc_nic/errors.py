"""The errors a user can cause or fix: the CLI prints these as one line.

Anything else is a bug and keeps its traceback.
"""

from mrc_nic.capture import CaptureError
from mrc_nic.ctl import DaemonError
from mrc_nic.fabric import FabricError
from mrc_nic.faults import FaultError
from mrc_nic.lab import LabError
from mrc_nic.pins import MapsMismatch, MapsMissing
from mrc_nic.preflight import PreflightError
from mrc_nic.qp import QpError
from mrc_nic.queues import QueueError
from mrc_nic.state import BadLabName, LabBusy
from mrc_nic.topology import TopologyError
from mrc_nic.traffic import TrafficError

KNOWN_ERRORS = (
    BadLabName,
    CaptureError,
    DaemonError,
    FabricError,
    FaultError,
    LabBusy,
    LabError,
    MapsMismatch,
    MapsMissing,
    PreflightError,
    QpError,
    QueueError,
    TopologyError,
    TrafficError,
)
