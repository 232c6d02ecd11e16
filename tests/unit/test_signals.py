"""SIGTERM stops a program whose main thread waits on its stop event (plugins.sdk.signals).

Each case runs in a fresh interpreter (a signal handler belongs to the process; a
deadlocked one cannot be recovered from), so a failure is a timeout of that child.
The two ways a handler that sets the event itself fails are reproduced on purpose:
the signal handled while the main thread holds the event's lock, and the signal
delivered to another thread while the main thread sleeps in ``stop.wait()``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from plugins.sdk.signals import SignalStop

CHILD_DEADLINE_S = 60
# The naive handler's deadlock is certain, not slow: this only bounds the wait for it.
DEADLOCK_SEEN_AFTER_S = 3

INSTALL = {
    "SignalStop": "from plugins.sdk.signals import SignalStop\nsignals = SignalStop.install(stop)",
    "naive": "signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())",
}

# The handler runs inside raise_signal, in this thread, while it holds the lock that
# stop.wait() holds between entering and going to sleep.
WHILE_HOLDING_THE_EVENTS_LOCK = """
with stop._cond:
    signal.raise_signal(signal.SIGTERM)
print("handler returned", flush=True)
assert stop.wait(60), "not stopped"
print("stopped", flush=True)
"""

# Once the main thread sleeps in stop.wait() (its waiter queued, the event's lock free
# again), a helper thread sends the signal to itself: the main thread is not woken.
TO_ANOTHER_THREAD = """
import time

def signal_from_another_thread():
    deadline = time.monotonic() + 60
    while True:
        with stop._cond:
            if stop._cond._waiters:
                break
        assert time.monotonic() < deadline, "the main thread never waited"
        time.sleep(0.001)
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

threading.Thread(target=signal_from_another_thread).start()
print("stopped" if stop.wait(60) else "not stopped", flush=True)
"""


def run_child(install: str, scenario: str, timeout: float) -> subprocess.CompletedProcess[str]:
    prologue = f"import signal, threading\nstop = threading.Event()\n{INSTALL[install]}\n"
    return subprocess.run(
        [sys.executable, "-c", prologue + textwrap.dedent(scenario)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_a_signal_handled_while_the_main_thread_holds_the_events_lock_stops_it() -> None:
    done = run_child("SignalStop", WHILE_HOLDING_THE_EVENTS_LOCK, CHILD_DEADLINE_S)
    assert (done.returncode, done.stdout) == (0, "handler returned\nstopped\n"), done.stderr


def test_a_signal_delivered_to_another_thread_stops_the_main_thread() -> None:
    done = run_child("SignalStop", TO_ANOTHER_THREAD, CHILD_DEADLINE_S)
    assert (done.returncode, done.stdout) == (0, "stopped\n"), done.stderr


def test_the_naive_handler_deadlocks_where_signal_stop_does_not() -> None:
    """The scenario above is the bug: a handler that sets the event itself never returns."""
    with pytest.raises(subprocess.TimeoutExpired) as info:
        run_child("naive", WHILE_HOLDING_THE_EVENTS_LOCK, DEADLOCK_SEEN_AFTER_S)
    assert b"handler returned" not in (info.value.stdout or b"")


def test_close_puts_the_previous_handlers_and_wakeup_fd_back() -> None:
    done = run_child(
        "SignalStop",
        """
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        signals.close()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        assert signal.set_wakeup_fd(-1) == -1
        signals.close()  # a second close changes nothing
        print("stopped" if stop.is_set() else "running", flush=True)
        """,
        CHILD_DEADLINE_S,
    )
    assert (done.returncode, done.stdout) == (0, "running\n"), done.stderr


def test_another_signal_with_a_python_handler_does_not_stop() -> None:
    done = run_child(
        "SignalStop",
        """
        signal.signal(signal.SIGUSR1, lambda signum, frame: None)
        signal.raise_signal(signal.SIGUSR1)
        signals.close()  # the relay has read everything written before it ends
        print("stopped" if stop.is_set() else "running", flush=True)
        """,
        CHILD_DEADLINE_S,
    )
    assert (done.returncode, done.stdout) == (0, "running\n"), done.stderr


def test_no_signals_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one signal"):
        SignalStop(threading.Event(), [])
