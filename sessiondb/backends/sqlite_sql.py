"""SQLite's SQL for sessiondb's statements: its dialect, and the statements a short
process runs first, compiled ahead (by their names in ``shapes.SHAPE_NAMES``).

Written by ``python -m sessiondb.backends.precompile`` (which says why); do not edit.
Longer than the house's 700 lines: it is data, read by a program, not by people.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.engine import Dialect


def dialect() -> Dialect:
    """SQLAlchemy's SQLite dialect with ``?`` placeholders, for statements not below
    (its imports cost ~10 ms, paid by the first such statement)."""
    from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect

    return sqlite_dialect(paramstyle="qmark")


SQL: dict[str, tuple[str, tuple[str, ...], dict[str, Any]]] = {
    "_DATA_KEYS_OF": (
        (
            "SELECT sessiondb_data_keys.version, sessiondb_data_keys.master_key_id, "
            "sessiondb_data_keys.wrapped_key, sessiondb_data_keys.completed_at \n"
            "FROM sessiondb_data_keys \n"
            "WHERE sessiondb_data_keys.namespace = ? ORDER BY "
            "sessiondb_data_keys.version"
        ),
        ("ns",),
        {"ns": None},
    ),
    "_GET_SESSION": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key" \n'
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.id = ? AND sessiondb_sessions.namespace = ?"
        ),
        ("sid", "ns"),
        {"sid": None, "ns": None},
    ),
    "_context(False, sealed=False)": (
        (
            "WITH RECURSIVE lineage(id, upto, parent_id, fork_seq, depth) AS \n"
            "(SELECT sessiondb_sessions.id AS id, sessiondb_sessions.last_seq AS "
            "upto, sessiondb_sessions.parent_id AS parent_id, "
            "sessiondb_sessions.fork_seq AS fork_seq, 0 AS depth \n"
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.id = ? AND sessiondb_sessions.namespace = ? "
            "UNION ALL SELECT parent.id AS id, CASE WHEN (lineage.fork_seq < "
            "lineage.upto) THEN lineage.fork_seq ELSE lineage.upto END AS anon_1, "
            "parent.parent_id AS parent_id, parent.fork_seq AS fork_seq, "
            "lineage.depth + 1 AS anon_2 \n"
            "FROM sessiondb_sessions AS parent, lineage \n"
            "WHERE parent.id = lineage.parent_id), \n"
            "tombstoned AS \n"
            "(SELECT sessiondb_records.target_seq AS target_seq \n"
            "FROM sessiondb_records JOIN lineage ON sessiondb_records.session_id = "
            "lineage.id AND sessiondb_records.seq <= lineage.upto \n"
            "WHERE sessiondb_records.kind = 'tombstone'), \n"
            "latest_compaction AS \n"
            "(SELECT sessiondb_records.seq AS seq, sessiondb_records.payload AS "
            "payload, sessiondb_records.first_kept_seq AS first_kept_seq \n"
            "FROM sessiondb_records JOIN lineage ON sessiondb_records.session_id = "
            "lineage.id AND sessiondb_records.seq <= lineage.upto \n"
            "WHERE sessiondb_records.kind = 'compaction' AND (sessiondb_records.seq "
            "NOT IN (SELECT tombstoned.target_seq \n"
            "FROM tombstoned)) ORDER BY sessiondb_records.seq DESC\n"
            " LIMIT 1 OFFSET ?)\n"
            " SELECT 0 AS part, lineage.upto AS seq, NULL AS payload \n"
            "FROM lineage \n"
            "WHERE lineage.depth = 0 UNION ALL SELECT 1, latest_compaction.seq, "
            "latest_compaction.payload \n"
            "FROM latest_compaction UNION ALL SELECT 2, sessiondb_records.seq, "
            "sessiondb_records.payload \n"
            "FROM sessiondb_records JOIN lineage ON sessiondb_records.session_id = "
            "lineage.id AND sessiondb_records.seq <= lineage.upto \n"
            "WHERE sessiondb_records.kind = 'message' AND sessiondb_records.seq >= "
            "coalesce((SELECT latest_compaction.first_kept_seq \n"
            "FROM latest_compaction), 0) AND (NOT (EXISTS (SELECT "
            "tombstoned.target_seq \n"
            "FROM tombstoned)) OR (sessiondb_records.seq NOT IN (SELECT "
            "tombstoned.target_seq \n"
            "FROM tombstoned))) UNION ALL SELECT 3, sessiondb_records.seq, "
            "sessiondb_records.payload \n"
            "FROM sessiondb_records JOIN lineage ON sessiondb_records.session_id = "
            "lineage.id AND sessiondb_records.seq <= lineage.upto \n"
            "WHERE sessiondb_records.kind = 'prune' AND (sessiondb_records.seq NOT "
            "IN (SELECT tombstoned.target_seq \n"
            "FROM tombstoned))"
        ),
        ("sid", "ns", "param_1"),
        {"sid": None, "ns": None, "param_1": 0},
    ),
    "_context(False, sealed=True)": (
        (
            "WITH RECURSIVE lineage(id, upto, parent_id, fork_seq, depth) AS \n"
            "(SELECT sessiondb_sessions.id AS id, sessiondb_sessions.last_seq AS "
            "upto, sessiondb_sessions.parent_id AS parent_id, "
            "sessiondb_sessions.fork_seq AS fork_seq, 0 AS depth \n"
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.id = ? AND sessiondb_sessions.namespace = ? "
            "UNION ALL SELECT parent.id AS id, CASE WHEN (lineage.fork_seq < "
            "lineage.upto) THEN lineage.fork_seq ELSE lineage.upto END AS anon_1, "
            "parent.parent_id AS parent_id, parent.fork_seq AS fork_seq, "
            "lineage.depth + 1 AS anon_2 \n"
            "FROM sessiondb_sessions AS parent, lineage \n"
            "WHERE parent.id = lineage.parent_id), \n"
            "tombstoned AS \n"
            "(SELECT sessiondb_records.target_seq AS target_seq \n"
            "FROM sessiondb_records JOIN lineage ON sessiondb_records.session_id = "
            "lineage.id AND sessiondb_records.seq <= lineage.upto \n"
            "WHERE sessiondb_records.kind = 'tombstone'), \n"
            "latest_compaction AS \n"
            "(SELECT sessiondb_records.seq AS seq, sessiondb_records.payload AS "
            "payload, sessiondb_records.session_id AS session_id, "
            "sessiondb_records.kind AS kind, sessiondb_records.role AS role, "
            "sessiondb_records.target_seq AS target_seq, "
            "sessiondb_records.first_kept_seq AS first_kept_seq \n"
            "FROM sessiondb_records JOIN lineage ON sessiondb_records.session_id = "
            "lineage.id AND sessiondb_records.seq <= lineage.upto \n"
            "WHERE sessiondb_records.kind = 'compaction' AND (sessiondb_records.seq "
            "NOT IN (SELECT tombstoned.target_seq \n"
            "FROM tombstoned)) ORDER BY sessiondb_records.seq DESC\n"
            " LIMIT 1 OFFSET ?)\n"
            " SELECT 0 AS part, lineage.upto AS seq, NULL AS payload, lineage.id AS "
            "sealed_sid, CAST(NULL AS TEXT) AS sealed_kind, CAST(NULL AS TEXT) AS "
            "sealed_role, CAST(NULL AS BIGINT) AS sealed_target_seq, CAST(NULL AS "
            "BIGINT) AS sealed_first_kept_seq, CAST(NULL AS TEXT) AS sealed_lineage, "
            "CAST(NULL AS TEXT) AS sealed_parent_id, CAST(NULL AS BIGINT) AS "
            "sealed_fork_seq \n"
            "FROM lineage \n"
            "WHERE lineage.depth = 0 UNION ALL SELECT 1, latest_compaction.seq, "
            "latest_compaction.payload, latest_compaction.session_id, "
            "latest_compaction.kind, latest_compaction.role, "
            "latest_compaction.target_seq, latest_compaction.first_kept_seq, "
            "CAST(NULL AS TEXT) AS anon_3, CAST(NULL AS TEXT) AS anon__1, CAST(NULL "
            "AS BIGINT) AS anon__2 \n"
            "FROM latest_compaction UNION ALL SELECT 2, sessiondb_records.seq, "
            "sessiondb_records.payload, sessiondb_records.session_id, "
            "sessiondb_records.kind, sessiondb_records.role, "
            "sessiondb_records.target_seq, sessiondb_records.first_kept_seq, "
            "CAST(NULL AS TEXT) AS anon_3, CAST(NULL AS TEXT) AS anon__1, CAST(NULL "
            "AS BIGINT) AS anon__2 \n"
            "FROM sessiondb_records JOIN lineage ON sessiondb_records.session_id = "
            "lineage.id AND sessiondb_records.seq <= lineage.upto \n"
            "WHERE sessiondb_records.kind = 'message' AND sessiondb_records.seq >= "
            "coalesce((SELECT latest_compaction.first_kept_seq \n"
            "FROM latest_compaction), 0) AND (NOT (EXISTS (SELECT "
            "tombstoned.target_seq \n"
            "FROM tombstoned)) OR (sessiondb_records.seq NOT IN (SELECT "
            "tombstoned.target_seq \n"
            "FROM tombstoned))) UNION ALL SELECT 3, sessiondb_records.seq, "
            "sessiondb_records.payload, sessiondb_records.session_id, "
            "sessiondb_records.kind, sessiondb_records.role, "
            "sessiondb_records.target_seq, sessiondb_records.first_kept_seq, "
            "CAST(NULL AS TEXT) AS anon_3, CAST(NULL AS TEXT) AS anon__1, CAST(NULL "
            "AS BIGINT) AS anon__2 \n"
            "FROM sessiondb_records JOIN lineage ON sessiondb_records.session_id = "
            "lineage.id AND sessiondb_records.seq <= lineage.upto \n"
            "WHERE sessiondb_records.kind = 'prune' AND (sessiondb_records.seq NOT "
            "IN (SELECT tombstoned.target_seq \n"
            "FROM tombstoned)) UNION ALL SELECT 4, sessiondb_records.seq, "
            "sessiondb_records.payload, sessiondb_records.session_id, "
            "sessiondb_records.kind, sessiondb_records.role, "
            "sessiondb_records.target_seq, sessiondb_records.first_kept_seq, "
            "CAST(NULL AS TEXT) AS anon_3, CAST(NULL AS TEXT) AS anon__1, CAST(NULL "
            "AS BIGINT) AS anon__2 \n"
            "FROM sessiondb_records JOIN lineage ON sessiondb_records.session_id = "
            "lineage.id AND sessiondb_records.seq <= lineage.upto \n"
            "WHERE sessiondb_records.kind IN ('compaction', 'tombstone', 'entry', "
            "'prune') AND (sessiondb_records.seq >= coalesce((SELECT "
            "latest_compaction.first_kept_seq \n"
            "FROM latest_compaction), 0) OR sessiondb_records.kind = 'tombstone') "
            "UNION ALL SELECT 5, lineage.fork_seq, NULL AS anon_3, lineage.id, NULL "
            "AS anon__3, NULL AS anon__4, NULL AS anon__5, NULL AS anon__6, "
            "coalesce(seal.seal, '') AS coalesce_1, lineage.parent_id, "
            "lineage.fork_seq AS fork_seq__1 \n"
            "FROM lineage LEFT OUTER JOIN sessiondb_lineage_seals AS seal ON "
            "seal.session_id = lineage.id AND seal.namespace = ?"
        ),
        ("sid", "ns", "param_1", "ns"),
        {"sid": None, "ns": None, "param_1": 0},
    ),
    "_context_texts()": (
        (
            "WITH tombstoned AS \n"
            "(SELECT sessiondb_records.target_seq AS target_seq \n"
            "FROM sessiondb_records \n"
            "WHERE sessiondb_records.session_id = ? AND sessiondb_records.kind = "
            "'tombstone'), \n"
            "latest_compaction AS \n"
            "(SELECT sessiondb_records.first_kept_seq AS first_kept_seq, "
            "sessiondb_records.payload AS payload \n"
            "FROM sessiondb_records \n"
            "WHERE sessiondb_records.session_id = ? AND sessiondb_records.kind = "
            "'compaction' AND (sessiondb_records.seq NOT IN (SELECT "
            "tombstoned.target_seq \n"
            "FROM tombstoned)) ORDER BY sessiondb_records.seq DESC\n"
            " LIMIT 1 OFFSET ?), \n"
            "answer AS \n"
            "(SELECT sessiondb_sessions.parent_id IS NOT NULL OR (EXISTS (SELECT * \n"
            "FROM sessiondb_records \n"
            "WHERE sessiondb_records.session_id = ? AND sessiondb_records.kind = "
            "'prune' AND (sessiondb_records.seq NOT IN (SELECT tombstoned.target_seq "
            "\n"
            "FROM tombstoned)))) AS elsewhere, sessiondb_sessions.last_seq AS "
            "last_seq \n"
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.id = ? AND sessiondb_sessions.namespace = ?)\n"
            " SELECT CASE WHEN answer.elsewhere THEN '-' WHEN (EXISTS (SELECT * \n"
            "FROM sessiondb_records \n"
            "WHERE sessiondb_records.session_id = ? AND sessiondb_records.role = "
            "'assistant' AND instr(sessiondb_records.payload, '\"responseId\"') > 0 "
            "AND sessiondb_records.seq >= coalesce((SELECT "
            "latest_compaction.first_kept_seq \n"
            "FROM latest_compaction), 0))) THEN '+' || coalesce((SELECT "
            "latest_compaction.payload \n"
            "FROM latest_compaction), '') ELSE '=' || coalesce((SELECT "
            "latest_compaction.payload \n"
            "FROM latest_compaction), '') END AS anon_1 \n"
            "FROM answer UNION ALL SELECT kept.payload \n"
            "FROM (SELECT sessiondb_records.payload AS payload \n"
            "FROM sessiondb_records \n"
            "WHERE sessiondb_records.session_id = ? AND sessiondb_records.kind = "
            "'message' AND sessiondb_records.seq >= coalesce((SELECT "
            "latest_compaction.first_kept_seq \n"
            "FROM latest_compaction), 0) AND sessiondb_records.seq <= (SELECT "
            "answer.last_seq \n"
            "FROM answer) AND (NOT (EXISTS (SELECT tombstoned.target_seq \n"
            "FROM tombstoned)) OR (sessiondb_records.seq NOT IN (SELECT "
            "tombstoned.target_seq \n"
            "FROM tombstoned))) AND (SELECT answer.elsewhere \n"
            "FROM answer) = 0 ORDER BY sessiondb_records.seq) AS kept"
        ),
        ("sid", "sid", "param_1", "sid", "sid", "ns", "sid", "sid"),
        {"sid": None, "param_1": 0, "ns": None},
    ),
    "_expiry_candidates(False)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.last_message_at \n"
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.namespace = ? AND "
            "sessiondb_sessions.last_message_at < ? ORDER BY "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.id\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "cutoff", "limit", "param_1"),
        {"ns": None, "cutoff": None, "limit": None, "param_1": 0},
    ),
    "_expiry_candidates(True)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.last_message_at \n"
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.namespace = ? AND "
            "sessiondb_sessions.last_message_at < ? AND "
            "(sessiondb_sessions.last_message_at, sessiondb_sessions.id) > (?, ?) "
            "ORDER BY sessiondb_sessions.last_message_at, sessiondb_sessions.id\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "cutoff", "after_at", "after_id", "limit", "param_1"),
        {
            "ns": None,
            "cutoff": None,
            "after_at": None,
            "after_id": None,
            "limit": None,
            "param_1": 0,
        },
    ),
    "_lineage_records(False, True, None, None, False, False, False, 5000, (), False)": (
        (
            "WITH RECURSIVE lineage(id, upto, parent_id, fork_seq, depth) AS \n"
            "(SELECT sessiondb_sessions.id AS id, sessiondb_sessions.last_seq AS "
            "upto, sessiondb_sessions.parent_id AS parent_id, "
            "sessiondb_sessions.fork_seq AS fork_seq, 0 AS depth \n"
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.id = ? AND sessiondb_sessions.namespace = ? "
            "UNION ALL SELECT parent.id AS id, CASE WHEN (lineage.fork_seq < "
            "lineage.upto) THEN lineage.fork_seq ELSE lineage.upto END AS anon_1, "
            "parent.parent_id AS parent_id, parent.fork_seq AS fork_seq, "
            "lineage.depth + 1 AS anon_2 \n"
            "FROM sessiondb_sessions AS parent, lineage \n"
            "WHERE parent.id = lineage.parent_id), \n"
            "tombstoned AS \n"
            "(SELECT sessiondb_records.target_seq AS target_seq \n"
            "FROM sessiondb_records JOIN lineage ON sessiondb_records.session_id = "
            "lineage.id AND sessiondb_records.seq <= lineage.upto \n"
            "WHERE sessiondb_records.kind = 'tombstone')\n"
            " SELECT sessiondb_records.session_id, sessiondb_records.seq, "
            "sessiondb_records.kind, sessiondb_records.created_at, "
            "sessiondb_records.uuid, sessiondb_records.payload \n"
            "FROM sessiondb_records JOIN lineage ON sessiondb_records.session_id = "
            "lineage.id AND sessiondb_records.seq <= lineage.upto \n"
            "WHERE (sessiondb_records.seq NOT IN (SELECT tombstoned.target_seq \n"
            "FROM tombstoned)) ORDER BY sessiondb_records.seq\n"
            " LIMIT 5000 OFFSET ?"
        ),
        ("sid", "ns", "param_1"),
        {"sid": None, "ns": None, "param_1": 0},
    ),
    "_lineage_records(False, True, None, None, False, False, False, None, (), False)": (
        (
            "WITH RECURSIVE lineage(id, upto, parent_id, fork_seq, depth) AS \n"
            "(SELECT sessiondb_sessions.id AS id, sessiondb_sessions.last_seq AS "
            "upto, sessiondb_sessions.parent_id AS parent_id, "
            "sessiondb_sessions.fork_seq AS fork_seq, 0 AS depth \n"
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.id = ? AND sessiondb_sessions.namespace = ? "
            "UNION ALL SELECT parent.id AS id, CASE WHEN (lineage.fork_seq < "
            "lineage.upto) THEN lineage.fork_seq ELSE lineage.upto END AS anon_1, "
            "parent.parent_id AS parent_id, parent.fork_seq AS fork_seq, "
            "lineage.depth + 1 AS anon_2 \n"
            "FROM sessiondb_sessions AS parent, lineage \n"
            "WHERE parent.id = lineage.parent_id), \n"
            "tombstoned AS \n"
            "(SELECT sessiondb_records.target_seq AS target_seq \n"
            "FROM sessiondb_records JOIN lineage ON sessiondb_records.session_id = "
            "lineage.id AND sessiondb_records.seq <= lineage.upto \n"
            "WHERE sessiondb_records.kind = 'tombstone')\n"
            " SELECT sessiondb_records.session_id, sessiondb_records.seq, "
            "sessiondb_records.kind, sessiondb_records.created_at, "
            "sessiondb_records.uuid, sessiondb_records.payload \n"
            "FROM sessiondb_records JOIN lineage ON sessiondb_records.session_id = "
            "lineage.id AND sessiondb_records.seq <= lineage.upto \n"
            "WHERE (sessiondb_records.seq NOT IN (SELECT tombstoned.target_seq \n"
            "FROM tombstoned)) ORDER BY sessiondb_records.seq"
        ),
        ("sid", "ns"),
        {"sid": None, "ns": None},
    ),
    "_lineage_records(True, True, None, None, False, False, False, 5000, (), False)": (
        (
            "WITH RECURSIVE lineage(id, upto, parent_id, fork_seq, depth) AS \n"
            "(SELECT sessiondb_sessions.id AS id, sessiondb_sessions.last_seq AS "
            "upto, sessiondb_sessions.parent_id AS parent_id, "
            "sessiondb_sessions.fork_seq AS fork_seq, 0 AS depth \n"
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.id = ? AND sessiondb_sessions.namespace = ? "
            "UNION ALL SELECT parent.id AS id, CASE WHEN (lineage.fork_seq < "
            "lineage.upto) THEN lineage.fork_seq ELSE lineage.upto END AS anon_1, "
            "parent.parent_id AS parent_id, parent.fork_seq AS fork_seq, "
            "lineage.depth + 1 AS anon_2 \n"
            "FROM sessiondb_sessions AS parent, lineage \n"
            "WHERE parent.id = lineage.parent_id)\n"
            " SELECT sessiondb_records.session_id, sessiondb_records.seq, "
            "sessiondb_records.kind, sessiondb_records.created_at, "
            "sessiondb_records.uuid, sessiondb_records.payload \n"
            "FROM sessiondb_records JOIN lineage ON sessiondb_records.session_id = "
            "lineage.id AND sessiondb_records.seq <= lineage.upto ORDER BY "
            "sessiondb_records.seq\n"
            " LIMIT 5000 OFFSET ?"
        ),
        ("sid", "ns", "param_1"),
        {"sid": None, "ns": None, "param_1": 0},
    ),
    "_lineage_records(True, True, None, None, False, False, False, None, (), False)": (
        (
            "WITH RECURSIVE lineage(id, upto, parent_id, fork_seq, depth) AS \n"
            "(SELECT sessiondb_sessions.id AS id, sessiondb_sessions.last_seq AS "
            "upto, sessiondb_sessions.parent_id AS parent_id, "
            "sessiondb_sessions.fork_seq AS fork_seq, 0 AS depth \n"
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.id = ? AND sessiondb_sessions.namespace = ? "
            "UNION ALL SELECT parent.id AS id, CASE WHEN (lineage.fork_seq < "
            "lineage.upto) THEN lineage.fork_seq ELSE lineage.upto END AS anon_1, "
            "parent.parent_id AS parent_id, parent.fork_seq AS fork_seq, "
            "lineage.depth + 1 AS anon_2 \n"
            "FROM sessiondb_sessions AS parent, lineage \n"
            "WHERE parent.id = lineage.parent_id)\n"
            " SELECT sessiondb_records.session_id, sessiondb_records.seq, "
            "sessiondb_records.kind, sessiondb_records.created_at, "
            "sessiondb_records.uuid, sessiondb_records.payload \n"
            "FROM sessiondb_records JOIN lineage ON sessiondb_records.session_id = "
            "lineage.id AND sessiondb_records.seq <= lineage.upto ORDER BY "
            "sessiondb_records.seq"
        ),
        ("sid", "ns"),
        {"sid": None, "ns": None},
    ),
    "_list_sessions(False, 'cron', False, 'sqlite', False)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key" \n'
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.source = "
            "'cron' ORDER BY sessiondb_sessions.last_message_at DESC, "
            "sessiondb_sessions.id DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "limit", "param_1"),
        {"ns": None, "limit": None, "param_1": 0},
    ),
    "_list_sessions(False, 'cron', False, 'sqlite', True)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key", sessiondb_turns.holder AS turn_holder, '
            "sessiondb_turns.acquired_at AS turn_acquired_at, "
            "sessiondb_turns.expires_at AS turn_expires_at \n"
            "FROM sessiondb_sessions LEFT OUTER JOIN sessiondb_turns ON "
            "sessiondb_turns.session_id = sessiondb_sessions.id AND "
            "sessiondb_turns.acquired_at IS NOT NULL AND sessiondb_turns.expires_at "
            "> strftime('%Y-%m-%d %H:%M:%f', 'now') \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.source = "
            "'cron' ORDER BY sessiondb_sessions.last_message_at DESC, "
            "sessiondb_sessions.id DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "limit", "param_1"),
        {"ns": None, "limit": None, "param_1": 0},
    ),
    "_list_sessions(False, 'cron', True, 'sqlite', False)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key" \n'
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.source = "
            "'cron' AND sessiondb_sessions.parent_id = ? ORDER BY "
            "sessiondb_sessions.last_message_at DESC, sessiondb_sessions.id DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "parent_id", "limit", "param_1"),
        {"ns": None, "parent_id": None, "limit": None, "param_1": 0},
    ),
    "_list_sessions(False, 'cron', True, 'sqlite', True)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key", sessiondb_turns.holder AS turn_holder, '
            "sessiondb_turns.acquired_at AS turn_acquired_at, "
            "sessiondb_turns.expires_at AS turn_expires_at \n"
            "FROM sessiondb_sessions LEFT OUTER JOIN sessiondb_turns ON "
            "sessiondb_turns.session_id = sessiondb_sessions.id AND "
            "sessiondb_turns.acquired_at IS NOT NULL AND sessiondb_turns.expires_at "
            "> strftime('%Y-%m-%d %H:%M:%f', 'now') \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.source = "
            "'cron' AND sessiondb_sessions.parent_id = ? ORDER BY "
            "sessiondb_sessions.last_message_at DESC, sessiondb_sessions.id DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "parent_id", "limit", "param_1"),
        {"ns": None, "parent_id": None, "limit": None, "param_1": 0},
    ),
    "_list_sessions(False, 'interactive', False, 'sqlite', False)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key" \n'
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.source = "
            "'interactive' ORDER BY sessiondb_sessions.last_message_at DESC, "
            "sessiondb_sessions.id DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "limit", "param_1"),
        {"ns": None, "limit": None, "param_1": 0},
    ),
    "_list_sessions(False, 'interactive', False, 'sqlite', True)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key", sessiondb_turns.holder AS turn_holder, '
            "sessiondb_turns.acquired_at AS turn_acquired_at, "
            "sessiondb_turns.expires_at AS turn_expires_at \n"
            "FROM sessiondb_sessions LEFT OUTER JOIN sessiondb_turns ON "
            "sessiondb_turns.session_id = sessiondb_sessions.id AND "
            "sessiondb_turns.acquired_at IS NOT NULL AND sessiondb_turns.expires_at "
            "> strftime('%Y-%m-%d %H:%M:%f', 'now') \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.source = "
            "'interactive' ORDER BY sessiondb_sessions.last_message_at DESC, "
            "sessiondb_sessions.id DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "limit", "param_1"),
        {"ns": None, "limit": None, "param_1": 0},
    ),
    "_list_sessions(False, 'interactive', True, 'sqlite', False)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key" \n'
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.source = "
            "'interactive' AND sessiondb_sessions.parent_id = ? ORDER BY "
            "sessiondb_sessions.last_message_at DESC, sessiondb_sessions.id DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "parent_id", "limit", "param_1"),
        {"ns": None, "parent_id": None, "limit": None, "param_1": 0},
    ),
    "_list_sessions(False, 'interactive', True, 'sqlite', True)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key", sessiondb_turns.holder AS turn_holder, '
            "sessiondb_turns.acquired_at AS turn_acquired_at, "
            "sessiondb_turns.expires_at AS turn_expires_at \n"
            "FROM sessiondb_sessions LEFT OUTER JOIN sessiondb_turns ON "
            "sessiondb_turns.session_id = sessiondb_sessions.id AND "
            "sessiondb_turns.acquired_at IS NOT NULL AND sessiondb_turns.expires_at "
            "> strftime('%Y-%m-%d %H:%M:%f', 'now') \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.source = "
            "'interactive' AND sessiondb_sessions.parent_id = ? ORDER BY "
            "sessiondb_sessions.last_message_at DESC, sessiondb_sessions.id DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "parent_id", "limit", "param_1"),
        {"ns": None, "parent_id": None, "limit": None, "param_1": 0},
    ),
    "_list_sessions(False, None, False, 'sqlite', False)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key" \n'
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.namespace = ? ORDER BY "
            "sessiondb_sessions.last_message_at DESC, sessiondb_sessions.id DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "limit", "param_1"),
        {"ns": None, "limit": None, "param_1": 0},
    ),
    "_list_sessions(False, None, False, 'sqlite', True)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key", sessiondb_turns.holder AS turn_holder, '
            "sessiondb_turns.acquired_at AS turn_acquired_at, "
            "sessiondb_turns.expires_at AS turn_expires_at \n"
            "FROM sessiondb_sessions LEFT OUTER JOIN sessiondb_turns ON "
            "sessiondb_turns.session_id = sessiondb_sessions.id AND "
            "sessiondb_turns.acquired_at IS NOT NULL AND sessiondb_turns.expires_at "
            "> strftime('%Y-%m-%d %H:%M:%f', 'now') \n"
            "WHERE sessiondb_sessions.namespace = ? ORDER BY "
            "sessiondb_sessions.last_message_at DESC, sessiondb_sessions.id DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "limit", "param_1"),
        {"ns": None, "limit": None, "param_1": 0},
    ),
    "_list_sessions(False, None, True, 'sqlite', False)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key" \n'
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.parent_id "
            "= ? ORDER BY sessiondb_sessions.last_message_at DESC, "
            "sessiondb_sessions.id DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "parent_id", "limit", "param_1"),
        {"ns": None, "parent_id": None, "limit": None, "param_1": 0},
    ),
    "_list_sessions(False, None, True, 'sqlite', True)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key", sessiondb_turns.holder AS turn_holder, '
            "sessiondb_turns.acquired_at AS turn_acquired_at, "
            "sessiondb_turns.expires_at AS turn_expires_at \n"
            "FROM sessiondb_sessions LEFT OUTER JOIN sessiondb_turns ON "
            "sessiondb_turns.session_id = sessiondb_sessions.id AND "
            "sessiondb_turns.acquired_at IS NOT NULL AND sessiondb_turns.expires_at "
            "> strftime('%Y-%m-%d %H:%M:%f', 'now') \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.parent_id "
            "= ? ORDER BY sessiondb_sessions.last_message_at DESC, "
            "sessiondb_sessions.id DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "parent_id", "limit", "param_1"),
        {"ns": None, "parent_id": None, "limit": None, "param_1": 0},
    ),
    "_list_sessions(True, 'cron', False, 'sqlite', False)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key" \n'
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.source = "
            "'cron' AND (sessiondb_sessions.last_message_at, sessiondb_sessions.id) "
            "< (?, ?) ORDER BY sessiondb_sessions.last_message_at DESC, "
            "sessiondb_sessions.id DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "after_at", "after_id", "limit", "param_1"),
        {"ns": None, "after_at": None, "after_id": None, "limit": None, "param_1": 0},
    ),
    "_list_sessions(True, 'cron', False, 'sqlite', True)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key", sessiondb_turns.holder AS turn_holder, '
            "sessiondb_turns.acquired_at AS turn_acquired_at, "
            "sessiondb_turns.expires_at AS turn_expires_at \n"
            "FROM sessiondb_sessions LEFT OUTER JOIN sessiondb_turns ON "
            "sessiondb_turns.session_id = sessiondb_sessions.id AND "
            "sessiondb_turns.acquired_at IS NOT NULL AND sessiondb_turns.expires_at "
            "> strftime('%Y-%m-%d %H:%M:%f', 'now') \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.source = "
            "'cron' AND (sessiondb_sessions.last_message_at, sessiondb_sessions.id) "
            "< (?, ?) ORDER BY sessiondb_sessions.last_message_at DESC, "
            "sessiondb_sessions.id DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "after_at", "after_id", "limit", "param_1"),
        {"ns": None, "after_at": None, "after_id": None, "limit": None, "param_1": 0},
    ),
    "_list_sessions(True, 'cron', True, 'sqlite', False)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key" \n'
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.source = "
            "'cron' AND sessiondb_sessions.parent_id = ? AND "
            "(sessiondb_sessions.last_message_at, sessiondb_sessions.id) < (?, ?) "
            "ORDER BY sessiondb_sessions.last_message_at DESC, sessiondb_sessions.id "
            "DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "parent_id", "after_at", "after_id", "limit", "param_1"),
        {
            "ns": None,
            "parent_id": None,
            "after_at": None,
            "after_id": None,
            "limit": None,
            "param_1": 0,
        },
    ),
    "_list_sessions(True, 'cron', True, 'sqlite', True)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key", sessiondb_turns.holder AS turn_holder, '
            "sessiondb_turns.acquired_at AS turn_acquired_at, "
            "sessiondb_turns.expires_at AS turn_expires_at \n"
            "FROM sessiondb_sessions LEFT OUTER JOIN sessiondb_turns ON "
            "sessiondb_turns.session_id = sessiondb_sessions.id AND "
            "sessiondb_turns.acquired_at IS NOT NULL AND sessiondb_turns.expires_at "
            "> strftime('%Y-%m-%d %H:%M:%f', 'now') \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.source = "
            "'cron' AND sessiondb_sessions.parent_id = ? AND "
            "(sessiondb_sessions.last_message_at, sessiondb_sessions.id) < (?, ?) "
            "ORDER BY sessiondb_sessions.last_message_at DESC, sessiondb_sessions.id "
            "DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "parent_id", "after_at", "after_id", "limit", "param_1"),
        {
            "ns": None,
            "parent_id": None,
            "after_at": None,
            "after_id": None,
            "limit": None,
            "param_1": 0,
        },
    ),
    "_list_sessions(True, 'interactive', False, 'sqlite', False)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key" \n'
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.source = "
            "'interactive' AND (sessiondb_sessions.last_message_at, "
            "sessiondb_sessions.id) < (?, ?) ORDER BY "
            "sessiondb_sessions.last_message_at DESC, sessiondb_sessions.id DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "after_at", "after_id", "limit", "param_1"),
        {"ns": None, "after_at": None, "after_id": None, "limit": None, "param_1": 0},
    ),
    "_list_sessions(True, 'interactive', False, 'sqlite', True)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key", sessiondb_turns.holder AS turn_holder, '
            "sessiondb_turns.acquired_at AS turn_acquired_at, "
            "sessiondb_turns.expires_at AS turn_expires_at \n"
            "FROM sessiondb_sessions LEFT OUTER JOIN sessiondb_turns ON "
            "sessiondb_turns.session_id = sessiondb_sessions.id AND "
            "sessiondb_turns.acquired_at IS NOT NULL AND sessiondb_turns.expires_at "
            "> strftime('%Y-%m-%d %H:%M:%f', 'now') \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.source = "
            "'interactive' AND (sessiondb_sessions.last_message_at, "
            "sessiondb_sessions.id) < (?, ?) ORDER BY "
            "sessiondb_sessions.last_message_at DESC, sessiondb_sessions.id DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "after_at", "after_id", "limit", "param_1"),
        {"ns": None, "after_at": None, "after_id": None, "limit": None, "param_1": 0},
    ),
    "_list_sessions(True, 'interactive', True, 'sqlite', False)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key" \n'
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.source = "
            "'interactive' AND sessiondb_sessions.parent_id = ? AND "
            "(sessiondb_sessions.last_message_at, sessiondb_sessions.id) < (?, ?) "
            "ORDER BY sessiondb_sessions.last_message_at DESC, sessiondb_sessions.id "
            "DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "parent_id", "after_at", "after_id", "limit", "param_1"),
        {
            "ns": None,
            "parent_id": None,
            "after_at": None,
            "after_id": None,
            "limit": None,
            "param_1": 0,
        },
    ),
    "_list_sessions(True, 'interactive', True, 'sqlite', True)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key", sessiondb_turns.holder AS turn_holder, '
            "sessiondb_turns.acquired_at AS turn_acquired_at, "
            "sessiondb_turns.expires_at AS turn_expires_at \n"
            "FROM sessiondb_sessions LEFT OUTER JOIN sessiondb_turns ON "
            "sessiondb_turns.session_id = sessiondb_sessions.id AND "
            "sessiondb_turns.acquired_at IS NOT NULL AND sessiondb_turns.expires_at "
            "> strftime('%Y-%m-%d %H:%M:%f', 'now') \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.source = "
            "'interactive' AND sessiondb_sessions.parent_id = ? AND "
            "(sessiondb_sessions.last_message_at, sessiondb_sessions.id) < (?, ?) "
            "ORDER BY sessiondb_sessions.last_message_at DESC, sessiondb_sessions.id "
            "DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "parent_id", "after_at", "after_id", "limit", "param_1"),
        {
            "ns": None,
            "parent_id": None,
            "after_at": None,
            "after_id": None,
            "limit": None,
            "param_1": 0,
        },
    ),
    "_list_sessions(True, None, False, 'sqlite', False)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key" \n'
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.namespace = ? AND "
            "(sessiondb_sessions.last_message_at, sessiondb_sessions.id) < (?, ?) "
            "ORDER BY sessiondb_sessions.last_message_at DESC, sessiondb_sessions.id "
            "DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "after_at", "after_id", "limit", "param_1"),
        {"ns": None, "after_at": None, "after_id": None, "limit": None, "param_1": 0},
    ),
    "_list_sessions(True, None, False, 'sqlite', True)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key", sessiondb_turns.holder AS turn_holder, '
            "sessiondb_turns.acquired_at AS turn_acquired_at, "
            "sessiondb_turns.expires_at AS turn_expires_at \n"
            "FROM sessiondb_sessions LEFT OUTER JOIN sessiondb_turns ON "
            "sessiondb_turns.session_id = sessiondb_sessions.id AND "
            "sessiondb_turns.acquired_at IS NOT NULL AND sessiondb_turns.expires_at "
            "> strftime('%Y-%m-%d %H:%M:%f', 'now') \n"
            "WHERE sessiondb_sessions.namespace = ? AND "
            "(sessiondb_sessions.last_message_at, sessiondb_sessions.id) < (?, ?) "
            "ORDER BY sessiondb_sessions.last_message_at DESC, sessiondb_sessions.id "
            "DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "after_at", "after_id", "limit", "param_1"),
        {"ns": None, "after_at": None, "after_id": None, "limit": None, "param_1": 0},
    ),
    "_list_sessions(True, None, True, 'sqlite', False)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key" \n'
            "FROM sessiondb_sessions \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.parent_id "
            "= ? AND (sessiondb_sessions.last_message_at, sessiondb_sessions.id) < "
            "(?, ?) ORDER BY sessiondb_sessions.last_message_at DESC, "
            "sessiondb_sessions.id DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "parent_id", "after_at", "after_id", "limit", "param_1"),
        {
            "ns": None,
            "parent_id": None,
            "after_at": None,
            "after_id": None,
            "limit": None,
            "param_1": 0,
        },
    ),
    "_list_sessions(True, None, True, 'sqlite', True)": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key", sessiondb_turns.holder AS turn_holder, '
            "sessiondb_turns.acquired_at AS turn_acquired_at, "
            "sessiondb_turns.expires_at AS turn_expires_at \n"
            "FROM sessiondb_sessions LEFT OUTER JOIN sessiondb_turns ON "
            "sessiondb_turns.session_id = sessiondb_sessions.id AND "
            "sessiondb_turns.acquired_at IS NOT NULL AND sessiondb_turns.expires_at "
            "> strftime('%Y-%m-%d %H:%M:%f', 'now') \n"
            "WHERE sessiondb_sessions.namespace = ? AND sessiondb_sessions.parent_id "
            "= ? AND (sessiondb_sessions.last_message_at, sessiondb_sessions.id) < "
            "(?, ?) ORDER BY sessiondb_sessions.last_message_at DESC, "
            "sessiondb_sessions.id DESC\n"
            " LIMIT ? OFFSET ?"
        ),
        ("ns", "parent_id", "after_at", "after_id", "limit", "param_1"),
        {
            "ns": None,
            "parent_id": None,
            "after_at": None,
            "after_id": None,
            "limit": None,
            "param_1": 0,
        },
    ),
    "_session_with_turn('sqlite')": (
        (
            "SELECT sessiondb_sessions.id, sessiondb_sessions.namespace, "
            "sessiondb_sessions.name, sessiondb_sessions.created_at, "
            "sessiondb_sessions.last_message_at, sessiondb_sessions.model, "
            "sessiondb_sessions.source, sessiondb_sessions.cron_job_id, "
            "sessiondb_sessions.system_prompt_override, "
            "sessiondb_sessions.metadata_json, sessiondb_sessions.last_seq, "
            "sessiondb_sessions.message_count, sessiondb_sessions.input_tokens, "
            "sessiondb_sessions.output_tokens, sessiondb_sessions.cache_read_tokens, "
            "sessiondb_sessions.cache_write_tokens, sessiondb_sessions.cost_total, "
            "sessiondb_sessions.parent_id, sessiondb_sessions.fork_seq, "
            'sessiondb_sessions."key", sessiondb_turns.holder AS turn_holder, '
            "sessiondb_turns.acquired_at AS turn_acquired_at, "
            "sessiondb_turns.expires_at AS turn_expires_at \n"
            "FROM sessiondb_sessions LEFT OUTER JOIN sessiondb_turns ON "
            "sessiondb_turns.session_id = sessiondb_sessions.id AND "
            "sessiondb_turns.acquired_at IS NOT NULL AND sessiondb_turns.expires_at "
            "> strftime('%Y-%m-%d %H:%M:%f', 'now') \n"
            "WHERE sessiondb_sessions.id = ? AND sessiondb_sessions.namespace = ?"
        ),
        ("sid", "ns"),
        {"sid": None, "ns": None},
    ),
}
