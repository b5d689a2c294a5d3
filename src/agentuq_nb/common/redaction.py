"""The one policy for secrets: what looks like an API key never reaches results, logs or notebooks.

A value is a secret when it contains the value of an environment variable whose *name* says it
holds one (``OPENAI_API_KEY``, ``HF_TOKEN``, ``…_SECRET``, ``…PASSWORD``…), or when it has the shape
of a known key. The shapes come from a maintained detector, Yelp's detect-secrets (the regular
expressions of its regex plugins: GitHub ``ghp_…``, GitLab ``glpat-…``, Slack ``xox[bp]-…``, AWS, Stripe,
JWTs, private keys, npm, PyPI, Twilio, SendGrid… - a list kept up to date upstream), plus the shapes it
does not know (:data:`EXTRA_KEY_SHAPES`: OpenAI ``sk-…``/``sk-proj-…``, Anthropic ``sk-ant-…``, Hugging
Face ``hf_…``, Google ``AIza…``, GitHub fine-grained ``github_pat_…``, ``Bearer …``). Its plugins'
``analyze_line`` is not called: it may verify a key over the network; only their patterns are used.
A mapping entry whose *key* names a secret (``api_key``, ``token``, ``authorization``…) is one
whatever its value.

:func:`find_secret` says where the first one is (for a clear refusal), :func:`redact` returns a
copy with every secret dropped or masked (for recording LLM arguments), :func:`mask_secrets` a copy
of any JSON-like document with the secrets inside its strings masked and its structure untouched
(for files such as executed notebooks and the explorer's page), :func:`secret_spans` where they are
in a text shown in pieces (a message as its tokens).
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import lru_cache
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
#: key shapes detect-secrets 1.5 does not know (its OpenAIDetector matches only the legacy ``…T3BlbkFJ…`` keys)
EXTRA_KEY_SHAPES = {
    "OpenAI or Anthropic key": re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}"),
    "Hugging Face token": re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"),
    "Google API key": re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"),
    "GitHub fine-grained token": re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}"),
    "GitHub token": re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"),
    "Authorization header value": re.compile(r"\b(?i:bearer)\s+[A-Za-z0-9._~+/\-]{8,}=*"),
}
#: detect-secrets plugins left out: a public IP address is no secret (an api_base names one); URL credentials
#: are masked by URL_CREDENTIALS, keeping the URL readable
SKIPPED_PLUGINS = frozenset({"IPPublicDetector", "BasicAuthDetector"})


@lru_cache(maxsize=1)
def key_shapes() -> tuple[tuple[str, re.Pattern], ...]:
    """``(kind, pattern)`` of every key shape: detect-secrets' regex plugins, then :data:`EXTRA_KEY_SHAPES`."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    shapes = []
    for kind, plugin in sorted(get_mapping_from_secret_type_to_class().items()):
        if issubclass(plugin, RegexBasedDetector) and plugin.__name__ not in SKIPPED_PLUGINS:
            shapes.extend((kind, pattern) for pattern in plugin.denylist)
    return tuple(shapes) + tuple(EXTRA_KEY_SHAPES.items())


def key_shape(text: str) -> str | None:
    """The kind of key ``text`` holds (``"GitHub Token"`` …), or None."""
    return next((kind for kind, pattern in key_shapes() if pattern.search(text)), None)


#: characters a detect-secrets pattern may take in around the key (``(?:\s|=|:|"|^)AKC…``): kept when masking
_CONTEXT = " \t\r\n=:\"'"


def mask_key_shapes(text: str) -> str:
    """``text`` with every key shape's match replaced by :data:`MASK` (the context characters a pattern took in
    around it are kept)."""
    for _, pattern in key_shapes():
        if pattern.search(text):
            text = pattern.sub(_mask_match, text)
    return text


def _mask_match(match: re.Match) -> str:
    found = match.group(0)
    core = found.strip(_CONTEXT)
    if not core:
        return found
    start = found.index(core)
    return found[:start] + MASK + found[start + len(core):]


#: ``scheme://user:password@host`` in a URL
URL_CREDENTIALS = re.compile(r"//[^/@\s]+:[^/@\s]+@")
#: a JSON string member inside text (a tool call's arguments as the page shows them): ``"key": "value"``
JSON_MEMBER = re.compile(r'"([^"\\]{1,64})"\s*:\s*"((?:[^"\\]|\\.)+)"')


def keyed_value_spans(text: str) -> list[tuple[int, int]]:
    """``[(start, end)]`` of the values of JSON members in ``text`` whose key names a secret
    (``"password": "hunter2"`` → the span of ``hunter2``): masked by key, whatever their shape."""
    if '"' not in text:
        return []
    return [m.span(2) for m in JSON_MEMBER.finditer(text) if names_secret(m.group(1))]


def mask_keyed_values(text: str) -> str:
    """``text`` with the value of every JSON member whose key names a secret replaced by :data:`MASK`."""
    for start, end in reversed(keyed_value_spans(text)):
        text = text[:start] + MASK + text[end:]
    return text
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
    kind = key_shape(text)
    if kind is not None:
        return f"it has the shape of an API key ({kind})"
    if keyed_value_spans(text):
        return "it holds a value under a key that names a secret"
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
        return mask_key_shapes(mask_keyed_values(text))
    return obj


def secret_spans(text: str, secrets: set[str] | None = None) -> list[tuple[int, int]]:
    """``[(start, end)]`` of what :func:`redact` masks in ``text`` (environment secrets, ``user:password`` of URLs,
    key shapes without the context characters a pattern takes in), merged where they overlap: for text shown in
    pieces (a message as its tokens), where masking each piece alone would miss a key split across them."""
    secrets = environment_secrets() if secrets is None else secrets
    spans = [(m.start(), m.end()) for s in secrets for m in re.finditer(re.escape(s), text)]
    spans += [(m.start() + 2, m.end() - 1) for m in URL_CREDENTIALS.finditer(text)]
    spans += keyed_value_spans(text)
    for _, pattern in key_shapes():
        for m in pattern.finditer(text):
            found = m.group(0)
            core = found.strip(_CONTEXT)
            if core:
                start = m.start() + found.index(core)
                spans.append((start, start + len(core)))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def mask_secrets(obj: Any, secrets: set[str] | None = None, keys: bool = True,
                 by_key: bool = True) -> tuple[Any, int]:
    """``(copy, count)``: ``obj`` with every string holding a secret masked as :func:`redact` masks
    text, by shape and (``by_key``) by key: a string under a key that names a secret is :data:`MASK` whatever its
    shape - off for a page's own structure, whose ``key`` fields are trajectory keys (its tool arguments, shown as
    text, are masked by key in the text). The structure is kept (a notebook stays a notebook), and a mapping's key
    holding a secret is masked as its values are (with ``keys``), so that a page that looks a value up by its key
    still finds it. ``count``: strings changed."""
    secrets = environment_secrets() if secrets is None else secrets
    count = 0

    def walk(value: Any, named: bool = False) -> Any:
        nonlocal count
        if isinstance(value, Mapping):
            return {(walk(k) if keys and isinstance(k, str) else k): walk(v, named or (by_key and names_secret(k)))
                    for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(walk(v, named) for v in value)
        if isinstance(value, str) and named and value:
            count += 1
            return MASK
        if isinstance(value, str) and (secret_in_text(value, secrets) or URL_CREDENTIALS.search(value)):
            count += 1
            return redact(value, secrets)
        return value

    return walk(obj), count
