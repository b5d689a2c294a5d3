"""Test data for tests and benchmarks: :mod:`.synthetic` writes τ²-bench results with token log-probs.

Beside the layers and outside the toolkit: tests and benchmarks import it, no module of ``agentuq_nb`` does (an
import-linter contract)."""
