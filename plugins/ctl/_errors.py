"""The CLI's one error type and its exit codes (docs/operating.md, "Exit codes")."""

from __future__ import annotations

import enum


class Exit(enum.IntEnum):
    """What ``networkplugin-ctl`` exits with; the same meaning for every command."""

    OK = 0
    FINDINGS = 1  # found something wrong (leaks, a failed check, a removal left removing)
    USAGE = 2  # bad arguments or config, an unknown operation or application, a bad token
    JOURNAL = 3  # a journal (a service's or the coordinator's) is missing, damaged, rolled back
    UNREACHABLE = 4  # a service or the coordinator does not answer, or is recovering
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


def failed_call(code: str, message: str, *, peer: str, timeout_s: float) -> tuple[Exit, str]:
    """A failed gRPC call to a service or the coordinator, in words, and its exit code.

    ``code`` is the status code's name. Transport failures say what a person should
    suspect, never gRPC's own text (``failed to connect to all addresses; last error:
    UNKNOWN: unix:...``); the codes our servers answer with a sentence of their own
    (``NOT_FOUND``, ``INVALID_ARGUMENT``, ...) keep it, as the server wrote it for callers.
    """
    if code == "UNAVAILABLE":
        return Exit.UNREACHABLE, f"nothing answers ({peer} down?)"
    if code == "DEADLINE_EXCEEDED":
        return Exit.UNREACHABLE, f"no answer within {timeout_s:g} s ({peer} hung or overloaded?)"
    if code in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
        return Exit.USAGE, f"refuses the token (is the token file the {peer}'s?)"
    if code == "UNIMPLEMENTED":
        return Exit.USAGE, f"answers, but not as a {peer} (another program's socket?)"
    if code == "DATA_LOSS":
        return Exit.JOURNAL, f"its journal is damaged: {message}"
    if code in ("NOT_FOUND", "INVALID_ARGUMENT"):
        return Exit.USAGE, message
    return Exit.FINDINGS, f"refused ({code}): {message}"
