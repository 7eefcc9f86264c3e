"""What a `mrc-nic write` transfer sends: its options, its WRITEs and their bytes.

Pure Python, no maps: rdma_write runs the plan through the verbs API.

A transfer of `size` bytes over N QPs gives each QP an equal share, cut into
WRITEs of at most `chunk` bytes (Pieces). Host memory is 64 MiB, transfers
reach 1 TiB, so every QP writes from a buffer of 2 chunks into a buffer of 2
chunks at the receiver, cut into slots: WRITE k goes from and to slot
k % slots, and WRITE k + slots is posted only once WRITE k has completed and,
with verify, been compared with what was sent (the byte-exact guarantee is
the double buffer's). WRITE k's bytes come from a seed and k (chunk_data), so
every WRITE differs and a misplaced or stale byte shows.

Messages (perftest style, scripts/bench_msgsize.py): with `msg`, a QP's
share is a series of messages of `msg` bytes, each one WRITE (or, above the
chunk, several). `depth` WRITEs are outstanding at once; `msgs_in_flight` 1
posts a message only once the one before has completed (ib_write_lat);
`duration` stops starting messages after that many seconds (perftest -D).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import random

from mrc_nic import nic

KIB = 1024
DEPTH_MAX = nic.SQ_DEPTH  # WRITEs outstanding per QP: what the NIC's send queue holds


@dataclasses.dataclass(kw_only=True)
class WriteOptions:
    """A transfer's own options (the QPs' attributes are rdma_write.QpOptions)."""

    size: int  # bytes to write, shared equally by the QPs
    chunk: int  # bytes per WRITE at most, a multiple of 1 KiB, at most the Connection's
    imm: bool = False  # every WRITE carries an immediate (its index): receive completions
    verify: bool = False  # compare each WRITE's bytes at the receiver once it completed
    seed: int = 1  # of the bytes written
    msg: int = 0  # message size (0: the whole share is one message)
    depth: int = 2  # WRITEs outstanding per QP (1..DEPTH_MAX, at most the slots)
    msgs_in_flight: int = 0  # 0: as many as depth allows; 1: one message at a time
    duration: float = 0.0  # seconds after which no message is started (0: none)
    timing: bool = False  # the result carries each WRITE's post time and NIC completion times
    # False sends the buffer as it is, as perftest does (no generation cost:
    # 16 MiB take 50 ms of Python).
    fill: bool = True  # write each WRITE's bytes (from seed) into the source buffer first

    def check(self) -> WriteOptions:
        """Refuse options out of range (ValueError saying what is allowed); self otherwise."""
        if self.size < 1:
            raise ValueError(f"size must be at least 1 byte, not {self.size}")
        if self.chunk < KIB or self.chunk % KIB:
            raise ValueError(f"chunk must be a positive multiple of 1 KiB, not {self.chunk}")
        if not 0 <= self.msg <= self.size:
            raise ValueError(f"msg must be 0 (one message) .. size ({self.size}), not {self.msg}")
        if not 1 <= self.depth <= DEPTH_MAX:
            raise ValueError(f"depth must be 1..{DEPTH_MAX} (the send queue), not {self.depth}")
        if self.msgs_in_flight < 0:
            raise ValueError(
                f"msgs_in_flight must be 0 (no limit) or more, not {self.msgs_in_flight}"
            )
        if not 0 <= self.duration <= 86400:
            raise ValueError(f"duration must be 0 (none) .. 86400 s, not {self.duration}")
        if self.verify and not self.fill:
            raise ValueError("verify needs fill: unfilled buffers have nothing to compare")
        return self

    @property
    def write_max(self) -> int:
        """The largest WRITE of this transfer: a chunk, or a smaller message."""
        return min(self.chunk, self.msg) if self.msg else self.chunk

    @property
    def slot(self) -> int:
        """Bytes of a buffer slot: the largest WRITE, in whole KiB."""
        return -(-self.write_max // KIB) * KIB


# Source data: rotations of one random pool, generated once per process. Why
# not random bytes per chunk: random.Random.randbytes makes 16 MiB in 50 ms
# of CPU, which the posting loop would spend under every chunk (measured when
# the daemon ran it: 5-30 ms delivery gaps in flap runs). A rotation is one copy.
POOL_BYTES = 4 << 20


@functools.cache
def _pool() -> bytes:
    raw = random.Random("mrc-nic source pool").randbytes(POOL_BYTES)
    return raw + raw  # every rotation is one slice


def chunk_data(seed: int, qp_index: int, k: int, length: int) -> bytes:
    """The source bytes of WRITE k of QP qp_index: each POOL_BYTES block a
    rotation of the pool by an offset hashed from (seed, qp_index, k, block),
    so that blocks differ from one another at every position (a packet placed
    in the wrong place does not go unseen) and the same seed gives the same
    bytes."""
    pool = memoryview(_pool())
    parts = []
    for block, at in enumerate(range(0, length, POOL_BYTES)):
        key = f"{seed}/{qp_index}/{k}/{block}".encode()
        off = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest()) % POOL_BYTES
        parts.append(pool[off : off + min(POOL_BYTES, length - at)])
    return b"".join(parts)


@dataclasses.dataclass(frozen=True)
class Pieces:
    """The WRITEs of one QP's share of a transfer, bytes [start, end): messages
    of `msg` bytes (the last one may be shorter), each cut into WRITEs of at
    most `chunk` bytes. Computed, not listed: a run of small messages has
    hundreds of thousands. An empty share is one WRITE of 0 bytes."""

    start: int
    end: int
    msg: int  # > 0
    chunk: int

    @property
    def per_msg(self) -> int:
        """WRITEs of a whole message."""
        return -(-self.msg // self.chunk)

    def __len__(self) -> int:
        whole, rest = divmod(self.end - self.start, self.msg)
        return whole * self.per_msg + -(-rest // self.chunk) or 1

    def __getitem__(self, k: int) -> tuple[int, int]:
        """(offset in the transfer, length) of WRITE k."""
        if not 0 <= k < len(self):
            raise IndexError(k)
        m, j = divmod(k, self.per_msg)
        base = self.start + m * self.msg
        length = min(self.msg, self.end - base) - j * self.chunk
        return base + j * self.chunk, max(0, min(self.chunk, length))

    def msg_of(self, k: int) -> int:
        """The message WRITE k belongs to (a shorter last message has fewer WRITEs)."""
        return k // self.per_msg

    def starts_msg(self, k: int) -> bool:
        return k % self.per_msg == 0

    def msgs_within(self, n: int) -> int:
        """Whole messages among the first n WRITEs."""
        return -(-len(self) // self.per_msg) if n >= len(self) else n // self.per_msg
