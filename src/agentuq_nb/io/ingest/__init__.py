"""Reading foreign formats: what other tools wrote, taken as untrusted input.

* :mod:`.results` - τ²-bench results (v0/v1 JSON, a v1.0.1 results directory), the original τ-bench's
  (:mod:`.tau_bench`), τ²-bench's judge summaries (:mod:`.judge_summary`) and Inspect AI logs (:mod:`.inspect_logs`),
  streamed through :mod:`.json_stream`;
* :mod:`.score_files` - per-trajectory scores from elsewhere (CSV/JSONL score files, a judge summary's verdicts);
* :mod:`.sidecars` - agentuq token sidecars (JSONL), read by the compiled scanner ``sidecar_scan``
  (``sidecar_scan.c``, built by the install) or by DuckDB;
* :mod:`.token_sources` - a trajectory's token log-probs in every form seen in the wild.

Imports :mod:`agentuq_nb.io`'s shared modules, never :mod:`agentuq_nb.io.store`."""
