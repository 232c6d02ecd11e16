"""Which guest failures the power-loss run boots again: QEMU's own abort only
(``harness.power_loss.emulator_abort``); a guest that ended for any other reason fails."""

from __future__ import annotations

from harness.power_loss import emulator_abort

ABORT = (
    "qemu-system-x86_64: hw/pci/msix.c:228: msix_table_mmio_write: Assertion "
    "`addr + size <= dev->msix_entries_nr * PCI_MSIX_ENTRY_SIZE' failed."
)


def test_qemus_assertion_in_the_console_tail_is_an_emulator_abort() -> None:
    failure = (
        "the guest ended before 'hello' event\nconsole (/tmp/c.log), last lines:\n"
        "[    1.385109] pci 0000:00:09.0: [1af4:1001] type 00 class 0x010000\n" + ABORT
    )
    assert emulator_abort(failure) == ABORT


def test_a_guest_that_ended_otherwise_is_not() -> None:
    assert emulator_abort("the guest ended before 'hello' event\n[ 3.1] Kernel panic") is None
    # the guest's own program failing an assertion is the code's failure
    assert emulator_abort("Traceback ...\nAssertionError: Assertion failed") is None
