"""Package facades that import a submodule only when one of its names is first used (PEP 562).

A notebook imports ``from agentuq_nb import uq`` and calls ``uq.turn_summary(...)`` without paying for the
embedding model or the LLM layer it does not use; a command line run starts fast.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, list[str]]) -> tuple[Callable[[str], object], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package`` whose names ``exports`` maps by submodule (a name
    ``agentuq_nb.…``: a module elsewhere in the package, whose name the facade offers where users look for it)."""
    module_of = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str):
        module = module_of.get(name)
        if module is None:
            try:  # a submodule (``uq.saup``) is an attribute of its package once imported
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError:
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        source = module if module.startswith(f"{package.split('.')[0]}.") else f"{package}.{module}"
        value = getattr(importlib.import_module(source), name)
        setattr(importlib.import_module(package), name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(module_of)

    return __getattr__, __dir__, sorted(module_of)
