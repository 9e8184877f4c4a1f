"""The Postgres that ``docker compose up -d --wait`` starts (``docker-compose.yml``).

The one place the tests (``tests/conftest.py``) and the benchmark (``bench``) take its
address from; ``tests/ops/test_compose.py`` checks that the compose file declares the same
port and credentials. Development tooling only: nothing in the library reads it.
"""

from __future__ import annotations

HOST = "127.0.0.1"
PORT = 5433
USER = "sessiondb"
PASSWORD = "sessiondb"
DATABASE = "sessiondb"

#: The URL of the compose database, for ``SessionStore.open`` and ``sessiondb --db``.
URL = f"postgresql://{USER}:{PASSWORD}@{HOST}:{PORT}/{DATABASE}"
