"""The suite's one-call entry point: :func:`run_conformance` runs the machine against a
database URL until enough operations have run."""

from __future__ import annotations

import asyncio
import uuid as uuidlib

from hypothesis import settings as Settings
from hypothesis.stateful import run_state_machine_as_test

from ..store import SessionStore
from .machine import conformance_machine


def run_conformance(
    url: str,
    *,
    steps: int = 200,
    steps_per_example: int = 25,
    migrate: bool = True,
    namespace_prefix: str = "sessiondb-conformance",
    clean_up: bool = True,
) -> int:
    """Run the conformance machine against the database at ``url`` until at least
    ``steps`` operations have run; returns how many ran. Each example works in a fresh
    namespace (``:memory:`` gives each example a fresh database).

    Args:
        url: as :meth:`SessionStore.open` takes it.
        steps: the fewest operations to run, over all examples.
        steps_per_example: the most operations in one example.
        migrate: upgrade the schema to head first (every store, for ``:memory:``).
        namespace_prefix: examples use namespaces ``{prefix}-{random hex}``.
        clean_up: delete each example's sessions when it ends.

    Raises:
        AssertionError: the store disagreed with the model; hypothesis prints the
            shortest sequence of operations it found that shows it.

    >>> run_conformance(":memory:", steps=50)  # doctest: +SKIP
    50
    """
    memory = url == ":memory:" or url.rstrip("/") in ("sqlite:", "sqlite:///:memory:")
    if migrate and not memory:

        async def upgrade() -> None:
            async with SessionStore.open(url) as store:
                await store.migrate()

        asyncio.run(upgrade())

    async def fresh_store() -> SessionStore:
        namespace = f"{namespace_prefix}-{uuidlib.uuid4().hex[:12]}"
        store = await SessionStore.connect(url, namespace)
        if memory and migrate:
            await store.migrate()
        return store

    machine = conformance_machine(fresh_store, clean_up=clean_up)
    while machine.steps_run < steps:
        missing = steps - machine.steps_run
        # An example runs up to steps_per_example steps (most run about that many).
        examples = max(1, -(-missing // max(1, steps_per_example)))
        run_state_machine_as_test(
            machine,
            settings=Settings(
                max_examples=examples,
                stateful_step_count=steps_per_example,
                deadline=None,
                database=None,
            ),
        )
    return machine.steps_run
