"""The base of the errors a user can cause or fix.

Each module defines its own error classes on top of MrcNicError; the CLI
prints any of them as one line. Anything else is a bug and keeps its
traceback.
"""


class MrcNicError(Exception):
    """Something the user asked for cannot be done as asked; the message says
    what is wrong and how to fix it, in one line."""
