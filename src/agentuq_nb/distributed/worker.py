"""A worker process's own settings, set once by :class:`~agentuq_nb.distributed.plugin.WorkerSetup`.

``api_bases``: several OpenAI-compatible servers (e.g. vLLM) share the load, one per worker.
Workers present when the plugin is registered are assigned round-robin in address order;
a worker that joins later takes ``api_bases[crc32(name) % len]``.
"""
from __future__ import annotations

from typing import Any

# this process's share of the api_base list (None outside a worker or without a list)
_API_BASE: str | None = None


def worker_api_base() -> str | None:
    return _API_BASE


def with_worker_api_base(llm_args: dict[str, Any]) -> dict[str, Any]:
    """``llm_args`` plus this worker's ``api_base``, unless the caller already chose one."""
    if _API_BASE is None or "api_base" in llm_args:
        return llm_args
    return {**llm_args, "api_base": _API_BASE}


def assign_api_bases(worker_addresses: list[str], api_bases: list[str]) -> dict[str, str]:
    return {addr: api_bases[i % len(api_bases)] for i, addr in enumerate(sorted(worker_addresses))} if api_bases else {}


def set_api_base(api_base: str | None) -> None:
    global _API_BASE
    _API_BASE = api_base
