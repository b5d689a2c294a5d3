"""A simulation domain: data (``db.json``, ``tasks.json``, ``policy.md``) plus a toolkit class.

A domain lives in ``agentuq_nb/sim/domains/<name>/``. Its ``toolkit.py`` defines a
:class:`Toolkit` subclass (exported as ``TOOLKIT``) whose public methods marked
with :func:`tool` are the tools the agent may call. Tool schemas in OpenAI's
function format are generated from the methods' signatures and docstrings, so
the code is the single source of truth for what the model is told.

Tools read and write a plain-JSON database (``self.db``); the DB hash used by
the evaluator is the SHA-256 of its canonical JSON (sorted keys), as in
τ²-bench.
"""
from __future__ import annotations

import copy
import hashlib
import importlib
import inspect
import json
import re
import types
import typing
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Literal

DOMAINS_DIR = Path(__file__).resolve().parent / "domains"

ToolType = Literal["read", "write", "generic"]


class ToolError(Exception):
    """A tool refused the call (bad arguments, unknown id, state does not allow it).

    The orchestrator turns it into a tool message with ``error: true``; the run goes on.
    """


class UnknownDomainError(ValueError):
    pass


class UnknownTaskError(ValueError):
    pass


def tool(kind: ToolType = "read") -> Callable[[Callable], Callable]:
    """Mark a toolkit method as a tool of type ``read``, ``write`` or ``generic``."""

    if kind not in ("read", "write", "generic"):
        raise ValueError(f"tool kind must be read|write|generic, got {kind!r}")

    def mark(fn: Callable) -> Callable:
        fn.__tool_type__ = kind
        return fn

    return mark


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object"}


def _json_type(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    if origin in (list, tuple):
        args = typing.get_args(annotation)
        item = _json_type(args[0]) if args else {}
        return {"type": "array", "items": item}
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _json_type(args[0])
        return {}
    if origin is Literal:
        values = list(typing.get_args(annotation))
        return {"type": _JSON_TYPES.get(type(values[0]), "string"), "enum": values}
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    return {}


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(description, {arg: description}) from a Google-style docstring."""
    doc = inspect.cleandoc(doc or "")
    description_lines: list[str] = []
    args: dict[str, str] = {}
    section = "description"
    current: str | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        if re.fullmatch(r"(Args|Arguments|Parameters):", stripped):
            section, current = "args", None
            continue
        if re.fullmatch(r"(Returns|Raises|Example|Examples|Notes?):", stripped):
            section, current = "other", None
            continue
        if section == "description":
            description_lines.append(stripped)
        elif section == "args":
            m = re.match(r"^(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$", stripped)
            if m and not line.startswith(" " * 8):
                current = m.group(1)
                args[current] = m.group(3).strip()
            elif current and stripped:
                args[current] = f"{args[current]} {stripped}".strip()
    description = " ".join(x for x in description_lines if x).strip()
    return description, args


def function_schema(fn: Callable) -> dict[str, Any]:
    """OpenAI function schema of a tool method (signature + docstring)."""
    description, arg_docs = _parse_docstring(fn.__doc__ or "")
    hints = typing.get_type_hints(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, param in inspect.signature(fn).parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        prop = _json_type(hints.get(name, str))
        if name in arg_docs:
            prop["description"] = arg_docs[name]
        properties[name] = prop
        if param.default is inspect.Parameter.empty:
            required.append(name)
    return {
        "type": "function",
        "function": {
            "name": fn.__name__,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def db_hash(db: Any) -> str:
    """SHA-256 of the canonical JSON of a database (sorted keys, no whitespace)."""
    text = json.dumps(db, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Toolkit:
    """Base class of a domain's tools. Subclasses define methods decorated with :func:`tool`."""

    def __init__(self, db: dict[str, Any]):
        self.db = db

    # -- introspection ----------------------------------------------------------
    @classmethod
    def tool_methods(cls) -> dict[str, Callable]:
        out = {}
        for name in dir(cls):
            if name.startswith("_"):
                continue
            fn = getattr(cls, name)
            if callable(fn) and hasattr(fn, "__tool_type__"):
                out[name] = fn
        # declaration order (source order) rather than alphabetical: the model sees them this way
        return dict(sorted(out.items(), key=lambda kv: inspect.getsourcelines(kv[1])[1]))

    @classmethod
    def tool_names(cls) -> list[str]:
        return list(cls.tool_methods())

    @classmethod
    def tool_types(cls) -> dict[str, ToolType]:
        return {name: fn.__tool_type__ for name, fn in cls.tool_methods().items()}

    @classmethod
    def tool_schemas(cls) -> list[dict[str, Any]]:
        return [function_schema(fn) for fn in cls.tool_methods().values()]

    def is_mutating(self, name: str) -> bool:
        return self.tool_types().get(name) == "write"

    # -- execution ----------------------------------------------------------------
    def call(self, name: str, arguments: Any) -> Any:
        """Run tool ``name`` with ``arguments`` (a dict); raise :class:`ToolError` on any misuse."""
        methods = self.tool_methods()
        if name not in methods:
            raise ToolError(f"Tool '{name}' not found. Available tools: {', '.join(methods)}")
        if not isinstance(arguments, dict):
            raise ToolError(f"Arguments of {name} must be a JSON object, got {type(arguments).__name__}")
        fn = getattr(self, name)
        try:
            bound = inspect.signature(fn).bind(**arguments)
        except TypeError as exc:
            raise ToolError(f"Bad arguments for {name}: {exc}") from None
        hints = typing.get_type_hints(getattr(type(self), name))
        for arg, value in bound.arguments.items():
            expected = hints.get(arg)
            if expected in (int, float) and isinstance(value, str):
                try:
                    bound.arguments[arg] = expected(value)
                except ValueError:
                    raise ToolError(f"Argument {arg} of {name} must be a number, got {value!r}") from None
            elif expected is str and not isinstance(value, str):
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    bound.arguments[arg] = str(value)
                else:
                    raise ToolError(f"Argument {arg} of {name} must be a string, got {value!r}")
        return fn(*bound.args, **bound.kwargs)

    def db_hash(self) -> str:
        return db_hash(self.db)


def to_tool_content(result: Any) -> str:
    """A tool result as the string a tool message carries (JSON for structures, τ² style)."""
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False)


@dataclass
class Domain:
    """A loaded domain: policy text, tasks, pristine DB and the toolkit class."""

    name: str
    path: Path
    policy: str
    tasks: list[dict[str, Any]]
    db: dict[str, Any] = field(repr=False)
    toolkit_cls: type[Toolkit] = field(repr=False)

    @property
    def task_ids(self) -> list[str]:
        return [str(t["id"]) for t in self.tasks]

    @cached_property
    def _tasks_by_id(self) -> dict[str, dict[str, Any]]:
        return {str(t["id"]): t for t in self.tasks}

    def get_task(self, task_id: str) -> dict[str, Any]:
        try:
            return self._tasks_by_id[str(task_id)]
        except KeyError:
            raise UnknownTaskError(
                f"Unknown task id {task_id!r} in domain {self.name!r}. "
                f"Valid task ids: {', '.join(self.task_ids)}"
            ) from None

    def select_tasks(self, task_ids: list[str] | None = None, num_tasks: int | None = None) -> list[dict[str, Any]]:
        """Tasks by id (in the order given) or the first ``num_tasks`` in file order."""
        if task_ids:
            bad = [str(t) for t in task_ids if str(t) not in self._tasks_by_id]
            if bad:
                raise UnknownTaskError(
                    f"Unknown task id(s) {', '.join(map(repr, bad))} in domain {self.name!r}. "
                    f"Valid task ids: {', '.join(self.task_ids)}"
                )
            seen: dict[str, dict] = {}
            for t in task_ids:
                seen.setdefault(str(t), self._tasks_by_id[str(t)])
            tasks = list(seen.values())
        else:
            tasks = list(self.tasks)
        if num_tasks is not None:
            if num_tasks < 1:
                raise ValueError(f"num_tasks must be >= 1, got {num_tasks}")
            tasks = tasks[:num_tasks]
        return tasks

    def fresh_db(self) -> dict[str, Any]:
        return copy.deepcopy(self.db)

    def make_toolkit(self) -> Toolkit:
        """A toolkit on a fresh copy of the initial database."""
        return self.toolkit_cls(self.fresh_db())

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.toolkit_cls.tool_schemas()

    def tool_types(self) -> dict[str, ToolType]:
        return self.toolkit_cls.tool_types()


def list_domains() -> list[str]:
    """Names of the built-in domains."""
    if not DOMAINS_DIR.is_dir():
        return []
    return sorted(
        p.name for p in DOMAINS_DIR.iterdir()
        if p.is_dir() and (p / "db.json").is_file() and (p / "tasks.json").is_file()
    )


_CACHE: dict[str, Domain] = {}


def load_domain(name: str) -> Domain:
    """Load a built-in domain by name; a clear error lists the valid names."""
    if isinstance(name, Domain):
        return name
    if name in _CACHE:
        return _CACHE[name]
    valid = list_domains()
    if name not in valid:
        raise UnknownDomainError(f"Unknown domain {name!r}. Valid domains: {', '.join(valid) or '(none)'}")
    path = DOMAINS_DIR / name
    try:
        db = json.loads((path / "db.json").read_text(encoding="utf-8"))
        tasks = json.loads((path / "tasks.json").read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"Domain {name!r}: invalid JSON in {exc.doc and path}: {exc}") from exc
    policy = (path / "policy.md").read_text(encoding="utf-8").strip()
    module = importlib.import_module(f"agentuq_nb.sim.domains.{name}.toolkit")
    toolkit_cls = getattr(module, "TOOLKIT", None)
    if not (isinstance(toolkit_cls, type) and issubclass(toolkit_cls, Toolkit)):
        raise ValueError(f"Domain {name!r}: {module.__file__} must define TOOLKIT = <Toolkit subclass>")
    ids = [str(t.get("id")) for t in tasks]
    if len(set(ids)) != len(ids):
        raise ValueError(f"Domain {name!r}: duplicate task ids in {path / 'tasks.json'}")
    domain = Domain(name=name, path=path, policy=policy, tasks=tasks, db=db, toolkit_cls=toolkit_cls)
    _CACHE[name] = domain
    return domain
