"""The CLI's one error type and its exit codes (docs/operating.md, "Exit codes")."""

from __future__ import annotations

import enum


class Exit(enum.IntEnum):
    """What ``networkplugin-ctl`` exits with; the same meaning for every command."""

    OK = 0
    FINDINGS = 1  # the command ran and found something wrong (leaks, a failed check...)
    USAGE = 2  # bad arguments, a bad node config, an unknown operation
    JOURNAL = 3  # a journal is missing, damaged or rolled back
    UNREACHABLE = 4  # a service that holds its journal does not answer on its socket
    REFUSED = 5  # reconcile --apply: no dry-run digest, or the state changed since it


class CtlError(Exception):
    """One line for a person, and the exit status it ends the command with."""

    def __init__(self, exit_code: Exit, message: str, *, subject: str = "") -> None:
        """``subject`` (the service and path the message starts with) is dropped from
        ``reason``, for a table whose row names the subject already."""
        super().__init__(message)
        self.exit_code = exit_code
        self.message = " ".join(message.split())
        self.reason = self.message.removeprefix(subject)
