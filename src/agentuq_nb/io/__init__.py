"""Reading and writing: τ²-bench results in every layout and the original τ-bench's, agentuq sidecars, the Parquet
token table, and :class:`~agentuq_nb.io.rundir.RunDir`, the one owner of a run folder's layout, manifest, lock and
commits."""
