"""The one policy for secrets: what looks like an API key never reaches results, logs or notebooks.

A value is a secret when it contains the value of an environment variable whose *name* says it
holds one (``OPENAI_API_KEY``, ``HF_TOKEN``, ``…_SECRET``, ``…PASSWORD``…), or when it has the shape
of a common key: OpenAI ``sk-…`` / ``sk-proj-…``, Anthropic ``sk-ant-…``, ``Bearer …``, Hugging Face
``hf_…``, AWS access key ids ``AKIA…``. A mapping entry whose *key* names a secret (``api_key``,
``token``, ``authorization``…) is one whatever its value.

:func:`find_secret` says where the first one is (for a clear refusal), :func:`redact` returns a
copy with every secret dropped or masked (for recording LLM arguments), :func:`mask_secrets` a copy
of any JSON-like document with the secrets inside its strings masked and its structure untouched
(for files such as executed notebooks).
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

#: words that make a name (an environment variable's or a mapping key's) name a secret:
#: ``OPENAI_API_KEY``, ``HF_TOKEN``, ``api_key``, ``Authorization``, ``extra_headers``; not ``max_tokens``
SECRET_WORDS = frozenset({"key", "apikey", "secret", "token", "password", "passwd", "auth", "authorization",
                          "credential", "credentials", "cookie", "cookies", "header", "headers", "bearer"})
#: run-together names that still say it (``PGPASSWORD``, ``SECRETKEY``, ``accesstoken``, ``privatekey``)
SECRET_PARTS = ("password", "passwd", "secret", "apikey", "accesstoken", "authtoken", "privatekey", "credential")
#: environment variables whose names match but which hold paths, not secrets (``$PWD`` is not a password)
NOT_SECRETS = frozenset({"PWD", "OLDPWD", "SSH_AUTH_SOCK", "XAUTHORITY", "KRB5CCNAME", "TOKENIZERS_PARALLELISM"})
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
#: the shapes of common API keys
KEY_SHAPES = re.compile(
    r"\b(?:sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}"   # OpenAI / Anthropic
    r"|hf_[A-Za-z0-9]{20,}"                          # Hugging Face
    r"|AKIA[0-9A-Z]{16})\b"                          # AWS access key id
    r"|\b(?i:bearer)\s+[A-Za-z0-9._~+/\-]{8,}=*",     # an Authorization header value (any case)
)
#: ``scheme://user:password@host`` in a URL
URL_CREDENTIALS = re.compile(r"//[^/@\s]+:[^/@\s]+@")
MIN_SECRET_LENGTH = 8  # shorter environment values ("1", "true") are settings, not keys
MASK = "***"


def names_secret(name: str) -> bool:
    """Whether a variable or key name says it holds a secret (by its words, any case)."""
    name = str(name)
    lowered = name.lower()
    return (any(word.lower() in SECRET_WORDS for word in _WORD.findall(name))
            or any(part in lowered for part in SECRET_PARTS))


def environment_secrets(environ: Mapping[str, str] | None = None) -> set[str]:
    """Values of the environment variables whose names say they hold a secret."""
    environ = os.environ if environ is None else environ
    return {v for k, v in environ.items()
            if k not in NOT_SECRETS and names_secret(k) and v and len(v) >= MIN_SECRET_LENGTH}


def secret_in_text(text: str, secrets: set[str] | None = None) -> str | None:
    """Why ``text`` holds a secret (``"environment"`` / ``"key shape"``), or None."""
    secrets = environment_secrets() if secrets is None else secrets
    if any(s in text for s in secrets):
        return "it contains the value of an API key set in the environment"
    if KEY_SHAPES.search(text):
        return "it has the shape of an API key"
    return None


def find_secret(obj: Any, where: str = "", secrets: set[str] | None = None) -> tuple[str, str] | None:
    """``(place, reason)`` of the first secret in ``obj`` (nested dicts/lists/strings), or None."""
    secrets = environment_secrets() if secrets is None else secrets
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            place = f"{where}.{k}" if where else str(k)
            if names_secret(k) and v not in (None, "", False):
                return place, f"'{k}' names a secret"
            reason = secret_in_text(str(k), secrets)  # a key can hold one too ({"sk-proj-…": 1})
            if reason:
                return where or "(top level)", f"a key: {reason}"
            found = find_secret(v, place, secrets)
            if found:
                return found
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            found = find_secret(v, f"{where}[{i}]", secrets)
            if found:
                return found
    elif isinstance(obj, str):
        reason = secret_in_text(obj, secrets)
        if reason:
            return where, reason
    return None


def redact(obj: Any, secrets: set[str] | None = None) -> Any:
    """A copy of ``obj`` fit to be recorded: mapping entries that name or hold a secret are dropped,
    secrets inside other strings are masked, ``user:password@`` in URLs becomes ``***@``."""
    secrets = environment_secrets() if secrets is None else secrets
    if isinstance(obj, Mapping):
        return {k: redact(v, secrets) for k, v in obj.items()
                if not names_secret(k) and find_secret(v, secrets=secrets) is None}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact(v, secrets) for v in obj)
    if isinstance(obj, str):
        text = URL_CREDENTIALS.sub(f"//{MASK}@", obj)
        for s in sorted(secrets, key=len, reverse=True):
            text = text.replace(s, MASK)
        return KEY_SHAPES.sub(MASK, text)
    return obj


def mask_secrets(obj: Any, secrets: set[str] | None = None) -> tuple[Any, int]:
    """``(copy, count)``: ``obj`` with every string holding a secret masked as :func:`redact` masks
    text; keys and structure are kept (a notebook stays a notebook). ``count``: strings changed."""
    secrets = environment_secrets() if secrets is None else secrets
    count = 0

    def walk(value: Any) -> Any:
        nonlocal count
        if isinstance(value, Mapping):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str) and (secret_in_text(value, secrets) or URL_CREDENTIALS.search(value)):
            count += 1
            return redact(value, secrets)
        return value

    return walk(obj), count
