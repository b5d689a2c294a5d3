"""A params file, typed: :class:`StudySpec` (``name``, ``parameters`` for every notebook, the ``notebooks`` in order,
an optional ``grid``)."""
from __future__ import annotations

from typing import Any, Optional

from pydantic import Field, field_validator

from agentuq_nb.common.naming import plain_name
from agentuq_nb.records.config import Config

#: the parameters ``reproduce`` sets from the project's layout (``runs/<name>``, ``figures/<name>``): a params file
#: cannot set them, so a study's tables and figures never land outside those folders
LAYOUT_PARAMETERS = ("run_dir", "figures_dir")


def no_layout_parameters(parameters: dict[str, Any] | None, where: str) -> None:
    """Refuse ``run_dir`` / ``figures_dir`` among a params file's ``parameters`` (or grid keys)."""
    for name in LAYOUT_PARAMETERS:
        if name in (parameters or {}):
            raise ValueError(f"{where} sets '{name}', which reproduce sets from the project's layout (runs/<name>/, "
                             "figures/<name>/): a params file cannot send a study's outputs elsewhere; name the "
                             "study instead ('name: …') or run the notebook yourself with papermill")


class NotebookEntry(Config):
    name: str = Field(min_length=1, description="a notebook of the project's notebooks/ folder, by file name")
    parameters: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _in_notebooks_folder(cls, value):
        return plain_name(value, "notebook")

    @field_validator("parameters")
    @classmethod
    def _no_layout(cls, value):
        no_layout_parameters(value, "a notebook's parameters")
        return value


class StudySpec(Config):
    """A params file: ``name``, ``parameters`` for every notebook, the ``notebooks`` in order, an optional ``grid``."""

    name: Optional[str] = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    notebooks: list[NotebookEntry] = Field(min_length=1)
    grid: Optional[dict[str, list[Any]]] = None

    @field_validator("name")
    @classmethod
    def _inside_runs_and_figures(cls, value):
        return value if value is None else plain_name(value, "study name")

    @field_validator("parameters", mode="before")
    @classmethod
    def _no_parameters(cls, value):
        return {} if value is None else value

    @field_validator("parameters")
    @classmethod
    def _no_layout(cls, value):
        no_layout_parameters(value, "parameters")
        return value

    @field_validator("notebooks", mode="before")
    @classmethod
    def _names_as_entries(cls, value):
        if not isinstance(value, list):
            return value
        return [{"name": v} if isinstance(v, str) else
                ({**v, "parameters": v.get("parameters") or {}} if isinstance(v, dict) else v) for v in value]

    @field_validator("grid")
    @classmethod
    def _grid_lists_not_empty(cls, grid):
        if grid is not None:
            if not grid:
                raise ValueError("'grid' must map parameter names to non-empty lists of values")
            no_layout_parameters(grid, "grid")
            for key, values in grid.items():
                if not values:
                    raise ValueError(f"grid values of '{key}' must be a non-empty list")
        return grid
