"""What the Google ADK adapter really sends to Postgres is what the Citus plan walks (as
``test_citus_statements.py`` for the store's own API). Needs ``sessiondb[adk]``."""

from __future__ import annotations

import pytest
from helpers.citus_plan import PLAN, uncatalogued
from helpers.frameworks import need_framework
from helpers.sent_sql import recording, sessiondb_statements

need_framework("google.adk", "adk")

from google.adk.events.event import Event  # noqa: E402
from google.adk.events.event_actions import EventActions  # noqa: E402
from google.adk.sessions.base_session_service import GetSessionConfig  # noqa: E402
from google.genai import types  # noqa: E402

from sessiondb import SessionStore  # noqa: E402
from sessiondb.integrations.adk import SessionDBSessionService  # noqa: E402

pytestmark = pytest.mark.postgres_only

APP, USER = "weather_app", "u-1"


def _event(text: str, delta: dict[str, object]) -> Event:
    return Event(
        invocation_id="inv",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=delta),
    )


async def test_every_adk_statement_sent_is_in_the_walked_catalogue(pg_url: str) -> None:
    sent_log: list[str] = []
    async with SessionStore.open(pg_url, "tenant", connect_args=recording(sent_log)) as store:
        service = SessionDBSessionService(store)
        made = await service.create_session(
            app_name=APP, user_id=USER, state={"app:units": "C", "user:name": "Ada", "k": 1}
        )
        session = await service.get_session(app_name=APP, user_id=USER, session_id=made.id)
        assert session is not None
        await service.append_event(session, _event("hi", {"k": 2, "user:name": "Bo"}))
        await service.append_event(session, _event("again", {}))
        again = await service.get_session(
            app_name=APP,
            user_id=USER,
            session_id=made.id,
            config=GetSessionConfig(num_recent_events=1),
        )
        assert again is not None and again.state["k"] == 2
        assert again.state["user:name"] == "Bo"
        await service.list_sessions(app_name=APP, user_id=USER)
        await service.list_sessions(app_name=APP)
        await service.delete_session(app_name=APP, user_id=USER, session_id=made.id)
    sent = sessiondb_statements(sent_log)
    unknown, used = uncatalogued(sent)
    assert not unknown, (
        f"{len(unknown)} statement(s) sent that the Citus plan's walk does not make "
        f"(add the builder or shape to tests/helpers/citus_plan.py; see {PLAN}):\n"
        + "\n---\n".join(unknown)
    )
    print(f"{len(sent)} statements sent, from {len(used)} builders: {sorted(used)}")
    assert {"adk_session", "adk_insert_session", "adk_list", "adk_ensure_state"} <= used
    assert {"adk_lock_state", "adk_set_state", "adk_update_session"} <= used
