"""The conformance rig: labs, crash enumeration, invariants, reports, the pytest plugin.

PYTEST_DONT_REWRITE: this package is product code that pytest loads as a plugin (the
pytest11 entry point), often after the rig's own command line has imported it; its
asserts are not rewritten, so pytest need not warn that it was imported first.
"""
