"""The suite's own helpers, shared by ``unit/``, ``behaviour/`` and ``ops/``: reading the
tables (``sql``), the corpus of real transcripts (``corpus``), generated files of every
format (``formats``), messages and overlays (``overlays``, ``compaction``), migrations
from older revisions (``migrations``), tables of inputs (``input_tables``) and the import
memory probe (``import_memory_probe``)."""
