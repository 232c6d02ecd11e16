"""NRI events and the subscription mask a plugin answers Configure with.

The numbers are those of ``nri.pkg.api.v1alpha1.Event``; an event's bit in the mask is
``1 << (event - 1)`` (UNKNOWN, 0, has no bit), as the runtime reads it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Final


class Event(enum.IntEnum):
    """An NRI event a plugin can subscribe to (``nri.pkg.api.v1alpha1.Event``)."""

    RUN_POD_SANDBOX = 1
    STOP_POD_SANDBOX = 2
    REMOVE_POD_SANDBOX = 3
    CREATE_CONTAINER = 4
    POST_CREATE_CONTAINER = 5
    START_CONTAINER = 6
    POST_START_CONTAINER = 7
    UPDATE_CONTAINER = 8
    POST_UPDATE_CONTAINER = 9
    STOP_CONTAINER = 10
    REMOVE_CONTAINER = 11
    UPDATE_POD_SANDBOX = 12
    POST_UPDATE_POD_SANDBOX = 13
    VALIDATE_CONTAINER_ADJUSTMENT = 14


#: What the coordinator needs: the sandbox's life and the container gate.
DEFAULT_EVENTS: Final = frozenset(
    {
        Event.RUN_POD_SANDBOX,
        Event.STOP_POD_SANDBOX,
        Event.REMOVE_POD_SANDBOX,
        Event.CREATE_CONTAINER,
    }
)

#: Events the plugin answers; subscribing to any other would have the runtime wait on
#: calls nobody handles (UPDATE/STOP_CONTAINER are answered with an empty reply).
HANDLED_EVENTS: Final = DEFAULT_EVENTS | {Event.UPDATE_CONTAINER, Event.STOP_CONTAINER}


def event_mask(events: Iterable[Event]) -> int:
    """The Configure mask of ``events``: bit ``event - 1`` set for each."""
    mask = 0
    for event in events:
        mask |= 1 << (Event(event) - 1)
    return mask


def events_in_mask(mask: int) -> frozenset[Event]:
    """The events whose bits ``mask`` has set; a bit of no known event is a ValueError."""
    known = event_mask(Event)
    if mask < 0 or mask & ~known:
        raise ValueError(f"event mask 0x{mask:x} has bits of no NRI event (known: 0x{known:x})")
    return frozenset(event for event in Event if mask & (1 << (event - 1)))


def check_subscription(events: Iterable[Event]) -> frozenset[Event]:
    """``events`` as a set, refusing an empty one or one the plugin does not handle."""
    chosen = frozenset(Event(event) for event in events)
    if not chosen:
        raise ValueError("an NRI plugin must subscribe to at least one event")
    unhandled = sorted(chosen - HANDLED_EVENTS)
    if unhandled:
        names = ", ".join(event.name for event in unhandled)
        raise ValueError(f"the NRI plugin does not handle these events: {names}")
    return chosen
