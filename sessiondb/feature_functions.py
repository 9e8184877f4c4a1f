"""The store's methods that are feature modules' functions, taking the store first:
import and export (:mod:`sessiondb.transfer`), compaction
(:mod:`sessiondb.compaction.engine`). :class:`~sessiondb.store.SessionStore` inherits
them from here; each module is imported when one of its methods is first used (the file
formats cost ~80 ms of imports, the compaction engine more: the start-up rule of
:mod:`sessiondb.cli`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_function

if TYPE_CHECKING:
    from . import transfer
    from .compaction import engine as compaction


class FeatureFunctions:
    """Methods bound from feature modules (see the module's docstring)."""

    # -- files (sessiondb.transfer and sessiondb.formats do the work) ---------------

    # The transfer functions, whose first argument is the store: import (a file or a
    # directory tree, at bulk speed, idempotent) and export (``format`` a name of
    # sessiondb.formats.FORMATS, or "html": a web page per session).
    if TYPE_CHECKING:
        import_path = transfer.import_path
        export_session = transfer.export_session
        export_all = transfer.export_all
    else:  # the file formats cost ~80 ms of imports: loaded on first use
        import_path = lazy_function("sessiondb.transfer", "import_path")
        export_session = lazy_function("sessiondb.transfer", "export_session")
        export_all = lazy_function("sessiondb.transfer", "export_all")

    # -- compaction: the engine's functions, whose first argument is the store -------

    if TYPE_CHECKING:
        compact = compaction.compact
        maybe_compact = compaction.maybe_compact
        plan_compaction = compaction.plan
        context_tokens = compaction.context_tokens
    else:
        compact = lazy_function("sessiondb.compaction.engine", "compact")
        maybe_compact = lazy_function("sessiondb.compaction.engine", "maybe_compact")
        plan_compaction = lazy_function("sessiondb.compaction.engine", "plan")
        context_tokens = lazy_function("sessiondb.compaction.engine", "context_tokens")
