"""The one exception the verbs API raises, as pyverbs' PyverbsRDMAError."""

from __future__ import annotations

import errno as errno_module

from mrc_nic.errors import MrcNicError


class VerbsError(MrcNicError):
    """A verb failed: `verb` (e.g. "post_send"), `errno` and what to do."""

    def __init__(self, verb: str, code: int, message: str, *, bad_wr: int | None = None) -> None:
        name = errno_module.errorcode.get(code, str(code))
        super().__init__(f"{verb}: {message} ({name})")
        self.verb, self.errno, self.bad_wr = verb, code, bad_wr
