"""The conformance suite as a package: every name the single module had still imports
from ``sessiondb.testing``, and the machine is a module-level class a backend can
subclass with class attributes."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

import sessiondb.testing
from sessiondb import ConfigurationError, SessionStore
from sessiondb.testing import ConformanceMachine, conformance_machine

# The public names of the single module sessiondb/testing.py was (its __all__ and its
# constants).
BEFORE = {
    "SUMMARY_PREFIX", "SUMMARY_SUFFIX", "ConformanceMachine", "ModelRecord", "ModelSession",
    "ReferenceModel", "StoreFactory", "conformance_machine", "info_view", "record_view",
    "run_conformance", "turns", "wire_messages", "KINDS", "MAX_KEY_CHARS", "MAX_KEY_BYTES",
    "CREATE_ARGS", "TEXTS", "CALL_IDS", "UUIDS", "NAMES", "GOOD_KEYS", "BAD_KEYS", "EXPECTED",
}  # fmt: skip
QUICK = settings(
    max_examples=3,
    stateful_step_count=10,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


async def memory_store() -> SessionStore:
    store = await SessionStore.connect(":memory:")
    await store.migrate()
    return store


class MemoryConformance(ConformanceMachine):
    store_factory = staticmethod(memory_store)
    max_sessions = 3


def test_every_old_public_name_still_imports() -> None:
    missing = sorted(name for name in BEFORE if not hasattr(sessiondb.testing, name))
    assert missing == []
    assert set(sessiondb.testing.__all__) <= BEFORE


def test_a_subclass_with_class_attributes_runs_and_counts_apart() -> None:
    run_state_machine_as_test(MemoryConformance, settings=QUICK)
    # At least max_examples: hypothesis may add examples it does not count (an overrun).
    assert MemoryConformance.examples_run >= 3
    assert MemoryConformance.steps_run >= 3  # every example runs one rule at least
    assert (ConformanceMachine.steps_run, ConformanceMachine.examples_run) == (0, 0)


def test_the_factory_function_subclasses_the_module_level_class() -> None:
    machine = conformance_machine(memory_store, max_sessions=2, clean_up=True)
    assert issubclass(machine, ConformanceMachine)
    assert (machine.max_sessions, machine.clean_up) == (2, True)
    assert machine.__name__ == "SessionDBConformance"
    run_state_machine_as_test(machine, settings=QUICK)
    assert machine.examples_run >= 3
    assert (ConformanceMachine.steps_run, ConformanceMachine.examples_run) == (0, 0)


def test_the_bare_machine_names_what_is_missing() -> None:
    with pytest.raises(ConfigurationError, match="store_factory"):
        ConformanceMachine()
