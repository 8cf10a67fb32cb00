"""The one kind of error a person fixes by changing what they asked for.

Every problem with the user's input (an unknown suite, op, convention or implementation, a malformed
suite or baseline file, a target that cannot be loaded) raises a UsageError whose message names the
problem and the fix; the CLI prints it and exits 2. Anything else that escapes is a bug in normdiff
and is shown as one (the CLI's internal-error path), never disguised as a usage error.
Pure: imports nothing from normdiff. The message for an unknown name is harness/data/names.py's.
"""
from __future__ import annotations


class UsageError(ValueError):
    """The user asked for something normdiff cannot do as asked; the message says what to change."""

