"""The compose database: the tests and the bench use the address docker-compose.yml
declares, and find the database when it is up."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import conftest
import pytest
from sqlalchemy.engine import make_url

from bench import databases

COMPOSE_FILE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def declared_url() -> str:
    """The URL docker-compose.yml declares for its Postgres, read from the file itself."""
    text = COMPOSE_FILE.read_text()

    def env(name: str) -> str:
        match = re.search(rf"^\s+{name}:\s*(\S+)\s*$", text, re.MULTILINE)
        assert match, f"{name} not in docker-compose.yml"
        return match.group(1).strip("'\"")

    ports = re.findall(r'^\s+-\s*"?([\d.]+):(\d+):(\d+)"?\s*$', text, re.MULTILINE)
    assert len(ports) == 1, f"one published port expected, got {ports}"
    host, port, inside = ports[0]
    assert inside == "5432"
    return (
        f"postgresql://{env('POSTGRES_USER')}:{env('POSTGRES_PASSWORD')}"
        f"@{host}:{port}/{env('POSTGRES_DB')}"
    )


def test_the_tests_and_the_bench_use_the_url_the_compose_file_declares() -> None:
    url = declared_url()
    assert url == conftest.COMPOSE_URL
    # The comment that shows users the URL says the same.
    assert f"#   {url}\n" in COMPOSE_FILE.read_text()


def _reachable_only(url: str) -> Any:
    async def can_connect(candidate: Any) -> str | None:
        return None if candidate.port == make_url(url).port else "refused"

    return can_connect


def test_conftest_takes_the_compose_database_after_the_local_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SESSIONDB_TEST_DATABASE_URL", raising=False)
    monkeypatch.setattr(conftest, "_can_connect", _reachable_only(conftest.COMPOSE_URL))
    found = conftest._find_postgres()
    assert found.admin_url == make_url(conftest.COMPOSE_URL)
    assert found.container is None


async def test_the_bench_takes_the_compose_database_after_the_local_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(databases.ENV_URL, raising=False)
    tried: list[str] = []
    compose = make_url(conftest.COMPOSE_URL)

    async def connect(**kwargs: Any) -> Any:
        tried.append(f"{kwargs['user']}@{kwargs['port']}")
        if kwargs["port"] != compose.port:
            raise OSError("refused")

        class Conn:
            async def close(self) -> None:
                pass

        return Conn()

    monkeypatch.setattr(databases.asyncpg, "connect", connect)
    found = await databases.find_postgres()
    assert found == make_url(conftest.COMPOSE_URL)
    assert tried[-1] == f"{compose.username}@{compose.port}"
    assert all(t.endswith("@5432") for t in tried[:-1])
