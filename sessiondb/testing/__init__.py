"""The conformance suite: a reference model of sessiondb's semantics, and a hypothesis
state machine that drives random operations against the model and a store side by side.

For anyone who writes a backend or wraps :class:`~sessiondb.SessionStore`: if the
store agrees with the model after every step, it keeps sessiondb's promises. Needs
``pip install 'sessiondb[testing]'`` (hypothesis).

Run it against a database (each example works in a fresh namespace)::

    from sessiondb.testing import run_conformance

    run_conformance("sqlite:///conformance.sqlite3", steps=200)

or, to choose hypothesis's settings and how stores are made, take the machine class::

    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test
    from sessiondb import SessionStore
    from sessiondb.testing import conformance_machine

    async def fresh_store() -> SessionStore:
        store = await SessionStore.connect(":memory:")
        await store.migrate()
        return store

    Machine = conformance_machine(fresh_store)
    run_state_machine_as_test(
        Machine, settings=settings(max_examples=10, stateful_step_count=30, deadline=None)
    )
    print(Machine.steps_run)

(or subclass :class:`ConformanceMachine` and set ``store_factory`` on it).

The parts, one module each:

- :mod:`~sessiondb.testing.model`: :class:`ReferenceModel`, the model alone: plain
  Python over wire-shape dicts, no database, no I/O. Its docstrings state the rules it
  encodes.
- :mod:`~sessiondb.testing.views`: the model's rows and a store's objects in one shape,
  as they are compared.
- :mod:`~sessiondb.testing.strategies`: the hypothesis strategies for messages, turns,
  texts and keys.
- :mod:`~sessiondb.testing.machine`: :class:`ConformanceMachine`, its rules and its
  invariant, and :func:`conformance_machine`.
- :mod:`~sessiondb.testing.runner`: :func:`run_conformance`.
"""

from __future__ import annotations

from ..errors import MissingDependencyError

# Checked here, before any part is imported: the parts stay in sys.modules once
# imported, and the model itself needs no hypothesis.
try:
    import hypothesis  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by a test that hides hypothesis
    raise MissingDependencyError("hypothesis", "testing") from exc

from .machine import ConformanceMachine, StoreFactory, conformance_machine
from .model import CREATE_ARGS as CREATE_ARGS
from .model import KINDS as KINDS
from .model import MAX_KEY_BYTES as MAX_KEY_BYTES
from .model import MAX_KEY_CHARS as MAX_KEY_CHARS
from .model import SUMMARY_PREFIX, SUMMARY_SUFFIX, ReferenceModel
from .runner import run_conformance
from .strategies import BAD_KEYS as BAD_KEYS
from .strategies import CALL_IDS as CALL_IDS
from .strategies import EXPECTED as EXPECTED
from .strategies import GOOD_KEYS as GOOD_KEYS
from .strategies import NAMES as NAMES
from .strategies import TEXTS as TEXTS
from .strategies import UUIDS as UUIDS
from .strategies import turns, wire_messages
from .views import ModelRecord, ModelSession, info_view, record_view

__all__ = [
    "SUMMARY_PREFIX",
    "SUMMARY_SUFFIX",
    "ConformanceMachine",
    "ModelRecord",
    "ModelSession",
    "ReferenceModel",
    "StoreFactory",
    "conformance_machine",
    "info_view",
    "record_view",
    "run_conformance",
    "turns",
    "wire_messages",
]
