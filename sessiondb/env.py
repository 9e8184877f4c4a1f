"""The environment variables sessiondb reads (``SESSIONDB_*``) and the defaults behind
them, declared in one place; :mod:`sessiondb.config` reads them.

Standard library only, and nothing else here: the CLI prints these names in its help
before it has loaded anything (start-up rule in :mod:`sessiondb.cli`); importing
:mod:`sessiondb.config` with its dataclasses cost ~30 ms of the ~0.14 s of
``sessiondb --help``.
"""

from __future__ import annotations

ENV_URL = "SESSIONDB_URL"
ENV_NAMESPACE = "SESSIONDB_NAMESPACE"
# Master keys of :class:`sessiondb.crypto.StaticKeyProvider.from_env` (``id:base64,…``,
# the first current) and the file of ``from_file``, for the CLI.
ENV_MASTER_KEYS = "SESSIONDB_MASTER_KEYS"
ENV_MASTER_KEYS_FILE = "SESSIONDB_MASTER_KEYS_FILE"
# The token of ``sessiondb serve`` when neither --token nor --token-file is given (an
# environment is readable by its own user only; argv, by every user of the machine).
ENV_VIEWER_TOKEN = "SESSIONDB_VIEWER_TOKEN"

DEFAULT_SQLITE_FILE = "sessiondb.sqlite3"
DEFAULT_NAMESPACE = "default"
