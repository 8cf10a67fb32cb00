"""The one kind of error a person fixes by changing what they asked for.

Every problem with the user's input (an unknown suite, op, convention or implementation, a malformed
suite or baseline file, a target that cannot be loaded) raises a UsageError whose message names the
problem and the fix; the CLI prints it and exits 2. Anything else that escapes is a bug in normdiff
and is shown as one (the CLI's internal-error path), never disguised as a usage error. An
OutputError is the machine refusing to write what was asked (a full disk, a read-only file system):
fixed by freeing space or writing elsewhere, so a UsageError too.
Pure: imports nothing from normdiff. The message for an unknown name is harness/data/names.py's.
"""
from __future__ import annotations


class UsageError(ValueError):
    """The user asked for something normdiff cannot do as asked; the message says what to change."""



class OutputError(UsageError):
    """A file or report folder normdiff was asked to write could not be written: the disk or a
    quota is full, the file is over the size limit, the file system is read-only, no permission.
    The message names the file, the system's reason, the fix, and the state the target was left in
    (an earlier file or report as it was). `kept` is what the command computed that is printed all
    the same (the CLI prints it before the message); the exit status is 2 unless the command says
    otherwise (README: Under faults)."""

    def __init__(self, message: str, kept: str = ""):
        super().__init__(message)
        self.kept = kept
