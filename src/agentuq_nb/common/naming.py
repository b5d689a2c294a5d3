"""The one way a value becomes part of a file name, a study name or a task key: :func:`slug`;
:func:`file_key`, a slug that keeps distinct keys distinct (checkpoint and sidecar names);
:func:`plain_name`, which refuses a name that would leave its folder; and :func:`short_model_name`, how tables and
figures name a model."""
from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from typing import Any

from agentuq_nb.common.limits import MAX_FILE_KEY_CHARS, MAX_STUDY_NAME_CHARS

#: characters a slug keeps as they are (a class of ``re``); every run of other characters becomes one ``_``
SAFE = r"A-Za-z0-9_.\-"


@lru_cache(maxsize=8)
def _unsafe(keep: str) -> re.Pattern:
    return re.compile(f"[^{SAFE}{''.join(re.escape(c) for c in keep)}]+")


def slug(value: Any, keep: str = "") -> str:
    """``value`` as text with every run of characters outside ``[A-Za-z0-9_.-]`` (plus ``keep``)
    replaced by one ``_``: ``slug("openai/gpt-4.1")`` → ``"openai_gpt-4.1"``."""
    return _unsafe(keep).sub("_", str(value))


def file_key(value: Any) -> str:
    """``value`` as a file-name part that keeps distinct values distinct: :func:`slug` when that leaves
    it as it is, else the slug plus 8 hex digits of the value's SHA-1 (``a|b`` and ``a:b`` both slug
    to ``a_b``; as keys they are ``a_b-<hash>``, two names; ``.``, ``..`` and ``.x`` get the hash too: never a
    folder's own name or a hidden file). Plain ids - every built-in task's - are
    unchanged, so the names of existing runs stay what they were. A value whose slug is longer than
    :data:`~agentuq_nb.common.limits.MAX_FILE_KEY_CHARS` keeps the start of it and 16 hex digits of its
    hash, ``MAX_FILE_KEY_CHARS`` in all (a 300-character task id still makes a valid file name); no key
    is longer than ``MAX_FILE_KEY_CHARS + 9``."""
    text = str(value)
    safe = slug(text)
    digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()
    if len(safe) > MAX_FILE_KEY_CHARS:
        return f"{safe[:MAX_FILE_KEY_CHARS - 17]}-{digest[:16]}"
    # an empty value gets a name too, and so does one starting with '.' ('.', '..', a hidden file)
    return safe if safe == text and text and not text.startswith(".") else f"{safe}-{digest[:8]}"


#: a name that is one file name in its folder: no separator, no ``..``, not hidden, not absolute
PLAIN_NAME = re.compile(rf"[A-Za-z0-9_][{SAFE}]*")


def plain_name(value: str, what: str) -> str:
    """``value`` when it is a plain file name (letters, digits, ``_ . -``; not ``..``), else ``ValueError``
    saying ``what`` it names - so that a study or notebook name cannot point outside its folder."""
    if len(value) > MAX_STUDY_NAME_CHARS:
        raise ValueError(f"{what} {value[:40]!r}… is {len(value)} characters long, more than the {MAX_STUDY_NAME_CHARS} "
                         "a name may have (it names a file or folder)")
    if not PLAIN_NAME.fullmatch(value) or ".." in value:
        raise ValueError(f"{what} {value!r} must be a plain name (letters, digits, '_', '.', '-'; no path "
                         "separators or '..'): it names a file inside the project's folder, not a path")
    return value


#: the date a provider appends to a model snapshot's name (``gpt-4.1-2025-04-14``)
SNAPSHOT_DATE = re.compile(r"-20\d\d-\d\d-\d\d$")


def short_model_name(model: str) -> str:
    """A model as tables and figures name it: without a litellm provider prefix (``ollama_chat/qwen2.5:7b`` →
    ``qwen2.5:7b``), an OpenAI fine-tune as ``ft:`` and its base model (``ft:gpt-4.1-2025-04-14:org:name:id`` →
    ``ft:gpt-4.1``), without a snapshot's date; the whole name stays in the run's manifest."""
    name = str(model).strip()
    if name.startswith("ft:"):
        name = ":".join(name.split(":")[:2])
    else:
        name = name.rsplit("/", 1)[-1] or name
    return SNAPSHOT_DATE.sub("", name)
