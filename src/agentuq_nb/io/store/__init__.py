"""This project's own run folder.

* :mod:`.rundir` - :class:`~agentuq_nb.io.store.rundir.RunDir`, the one owner of a run folder's layout,
  manifest, commits and stamps; its lock is :mod:`.run_lock`;
* :mod:`.token_table` - the Parquet token table (one file or a dataset by task).

Imports :mod:`agentuq_nb.io`'s shared modules, never :mod:`agentuq_nb.io.ingest`."""
