"""Adapters for agent frameworks, each behind an optional extra: importing one without
its framework installed raises :class:`sessiondb.MissingDependencyError` naming the extra."""
