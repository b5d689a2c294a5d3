"""The documented limits on untrusted input: one home for every bound past which an input is refused with a
clear message rather than read until memory or time runs out.

Each bound is far above anything a real run writes (the largest τ²-bench message seen is a few hundred
kilobytes; a study's params file a few kilobytes), so only a broken or hostile input meets one.
"""
from __future__ import annotations

MiB = 1 << 20

# ------------------------------------------------------------------ results JSON (io.ingest.results)
#: one JSON string (a message's content, a tool result…) or number token of a results file
MAX_JSON_TOKEN_BYTES = 64 * MiB
#: nesting of arrays and objects in a results file past which the scanner reads it (τ²-bench's deepest is
#: ~8); the scanner refuses what Python's decoder cannot nest (its recursion limit, ~1,000 levels)
MAX_JSON_DEPTH = 500

# ------------------------------------------------------------------ sidecars (io.ingest.sidecars)
#: one line of a sidecar JSONL file (one token row: a few hundred bytes; DuckDB itself stops at 16 MiB)
MAX_SIDECAR_LINE_BYTES = 16 * MiB

# ------------------------------------------------------------------ small JSON files of a run folder
#: manifest.json, a commit's journal, checkpoint settings, a --tools file, the lock holder's note
MAX_SMALL_JSON_BYTES = 64 * MiB

# ------------------------------------------------------------------ params files (pipeline.reproduce)
#: the params YAML file itself
MAX_PARAMS_BYTES = 1 * MiB
#: nodes of a params file after its aliases are expanded (a "billion laughs" file expands past any memory)
MAX_PARAMS_NODES = 100_000
#: nesting of mappings and lists in a params file
MAX_PARAMS_DEPTH = 64
#: studies one params file's ``grid`` expands to
MAX_GRID_POINTS = 1_000

# ------------------------------------------------------------------ names (common.naming)
#: characters of a file-name part made from a value (task id, domain, study name); longer values are
#: shortened and keep a hash of the whole, so that names stay distinct and under the file system's 255 bytes
MAX_FILE_KEY_CHARS = 64
#: characters of a study name (a grid point's name); runs/<name>/ is one path component
MAX_STUDY_NAME_CHARS = 160

# ------------------------------------------------------------------ detector folders (io.store.detector_dir)
#: card.json and model.json of a detector folder
MAX_DETECTOR_JSON_BYTES = 64 * MiB
#: arrays.npz of a detector folder, as stored and as inflated
MAX_DETECTOR_ARRAY_BYTES = 1024 * MiB
#: one table (CSV) of a detector folder
MAX_DETECTOR_TABLE_BYTES = 256 * MiB
