"""Reading and writing, in two rooms that do not import each other (an import-linter contract):

* :mod:`~agentuq_nb.io.ingest` - reading foreign formats: τ²-bench results in every layout, the original
  τ-bench's, Inspect AI logs, agentuq sidecars (with the compiled scanner) and token log-probs in every form;
* :mod:`~agentuq_nb.io.store` - this project's own run folder: :class:`~agentuq_nb.io.store.rundir.RunDir`,
  the one owner of its layout, manifest, lock and commits, and the Parquet token table.

What both use stays here: :mod:`.errors` (errors and counted warnings about bad input), :mod:`.files` (opening
untrusted files), :mod:`.atomic` (atomic writes) and :mod:`.input_warnings` (reporting the counted warnings)."""
