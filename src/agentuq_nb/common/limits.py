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

# ------------------------------------------------------------------ Inspect AI logs (io.ingest.inspect_logs)
#: one member of an ``.eval`` archive once inflated (a sample's JSON: the longest agent runs are tens of MB)
MAX_ARCHIVE_MEMBER_BYTES = 256 * MiB
#: characters one sample's attachment references resolve to (Inspect stores a long text once and refers to it)
MAX_RESOLVED_ATTACHMENT_BYTES = 256 * MiB

# ------------------------------------------------------------------ sidecars (io.ingest.sidecars)
#: one line of a sidecar JSONL file (one token row: a few hundred bytes; DuckDB itself stops at 16 MiB)
MAX_SIDECAR_LINE_BYTES = 16 * MiB

# ------------------------------------------------------------------ score files (io.ingest.score_files)
#: a per-trajectory score file a user imports, or a judge summary (τ²-bench's published ones: 1.7-3.4 MB)
MAX_SCORE_FILE_BYTES = 256 * MiB

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

# ------------------------------------------------------------------ tool schemas (llm.tool_format)
#: tools one request (or one run's --tools file, or a results file's tool_defs) may give
MAX_TOOLS = 128
#: the tools' schemas together, as JSON (τ²-bench's largest domain's 14 tools are ~20 KB)
MAX_TOOL_SCHEMAS_BYTES = 1 * MiB
#: nesting of a tool's parameters schema, as JSON (OpenAI's structured outputs allow 5 levels of objects, about
#: 12 here; a schema nested 300 deep held the model 70 s)
MAX_TOOL_SCHEMA_DEPTH = 32
#: a schema's minItems / maxItems / minProperties / maxProperties: the call's grammar spells out every item
#: (minItems 1,000,000,000 grew serve-local to 23.5 GB)
MAX_SCHEMA_ITEMS = 256
#: a schema's minLength / maxLength (characters; a call is at most max_tokens long anyway)
MAX_SCHEMA_CHARS = 8192
#: values of one enum
MAX_SCHEMA_ENUM = 4096

# ------------------------------------------------------------------ serve-local (llm.server)
#: a request's body (a chat that fills the 8,192-token window is well under 1 MiB; a 30 MB body was read for
#: 20 s and 1.3 GB before it was refused)
MAX_REQUEST_BYTES = 16 * MiB
#: bytes of request bodies serve-local holds at once, read and waiting for the model (60 bodies of 15.9 MB held
#: 3.5 GB): four bodies of the largest size, hundreds of ordinary chats; past it a 503
MAX_HELD_REQUEST_BYTES = 64 * MiB
#: nesting of a request's JSON body (a 100,000-deep body was a 500)
MAX_REQUEST_DEPTH = 64
#: seconds one request may hold the model (serve-local --max-request-seconds): 1,024 tokens at ~25 tokens/s take ~40
DEFAULT_MAX_REQUEST_SECONDS = 300

# ------------------------------------------------------------------ names (common.naming)
#: characters of a file-name part made from a value (task id, domain, study name); longer values are
#: shortened and keep a hash of the whole, so that names stay distinct and under the file system's 255 bytes
MAX_FILE_KEY_CHARS = 64
#: characters of a study name (a grid point's name); runs/<name>/ is one path component
MAX_STUDY_NAME_CHARS = 160

# ------------------------------------------------------------------ options (records.config: Seed, NBoot, …)
#: a random seed: numpy's and scikit-learn's generators take 0 .. 2**32 - 1
MAX_SEED = 2**32 - 1
#: bootstrap resamples of a CI or test (the default is 1,000; each resample's metrics are kept, and Kendall's
#: τ on a many-valued reward keeps a count row per resample: 100,000 x 2,000 trajectories is 1.6 GB at most)
MAX_N_BOOT = 100_000
#: bins of a calibration or ECE table, shares of a trajectory (early-warning), k values of pass^k: grid-like
#: options each of whose points costs a pass over the run
MAX_GRID_OPTION = 1_000
#: simulations a --limit selects (rescore, sample-actions): far past any results file, and within what Python's
#: islice takes (``--limit 1e20`` failed after the model had loaded)
MAX_LIMIT = 10**9
#: samples drawn at one prompt (sample-actions --k, probe --n): OpenAI's limit on n, serve-local's too
MAX_SAMPLES = 128

# ------------------------------------------------------------------ detector folders (io.store.detector_dir)
#: card.json and model.json of a detector folder
MAX_DETECTOR_JSON_BYTES = 64 * MiB
#: arrays.npz of a detector folder, as stored and as inflated
MAX_DETECTOR_ARRAY_BYTES = 1024 * MiB
#: one table (CSV) of a detector folder
MAX_DETECTOR_TABLE_BYTES = 256 * MiB
