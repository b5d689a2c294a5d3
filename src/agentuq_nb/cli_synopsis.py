"""The synopsis of every command, made from the commands themselves (so from the step configs and their ``COMMAND``).
``docs/guide/cli.md`` holds :data:`MARKER` where the synopsis goes, and the documentation site's build fills it in
(``docs/hooks/cli_synopsis.py``, a MkDocs hook): a new step's command is on the page without an edit to it.
``python -m agentuq_nb.cli_synopsis`` prints it."""
from __future__ import annotations

import re
import sys
import textwrap
from enum import Enum

import typer.main

#: how wide the synopsis is, and where a command's continuation lines and comments start
WIDTH, INDENT = 116, " " * 20


def usage_word(param) -> str:
    """One argument or option as the synopsis writes it: ``RUN_DIR``, ``--out OUT``, ``[--n-boot 1000]``,
    ``[--embedder minilm-static|minilm|hash|none]``, ``[--estimator NAME …]``, ``[--no-hmm]``."""
    name = (param.name or "").upper()
    if param.param_type_name == "argument":
        return f"{name} …" if param.nargs == -1 else name
    flag = param.opts[0]
    if getattr(param, "is_flag", False):
        return f"[{param.secondary_opts[0]}]" if param.default is True and param.secondary_opts else f"[{flag}]"
    default = param.default.value if isinstance(param.default, Enum) else param.default
    choices = getattr(getattr(param, "type_descriptor", None), "choices", None)
    if choices:
        value = "|".join(str(getattr(c, "value", c)) for c in choices)
    elif param.multiple:
        value = f"{name} …"
    else:
        value = name if default is None or param.required else str(default)
    return f"{flag} {value}" if param.required else f"[{flag} {value}]"


def command_synopsis(name: str, command) -> str:
    """A command's lines: its usage, wrapped, then its help's first paragraph as a comment."""
    words = [f"agentuq-nb\xa0{name}", *(usage_word(p).replace(" ", "\xa0") for p in command.params
                                          if p.name != "help")]  # a word is never broken: wrapped between words
    lines = [line.replace("\xa0", " ") for line in textwrap.wrap(" ".join(words), WIDTH, subsequent_indent=INDENT,
                                                                 break_on_hyphens=False, break_long_words=False)]
    summary = re.sub(r"\s+", " ", (command.help or "").split("\n\n")[0]).strip()
    lines += textwrap.wrap(summary, WIDTH, initial_indent=INDENT + "# ", subsequent_indent=INDENT + "# ",
                           break_on_hyphens=False, break_long_words=False)
    return "\n".join(lines)


def synopsis(app: typer.Typer) -> str:
    """Every command's synopsis, in the order ``agentuq-nb --help`` lists them."""
    commands = typer.main.get_command(app).commands
    return "\n".join(command_synopsis(name, command) for name, command in commands.items()) + "\n"


#: where a page wants the synopsis (replaced by a code block of it when the site is built)
MARKER = "<!-- synopsis: made from the commands when the site is built -->"


def fill_synopsis(markdown: str) -> str:
    """``markdown`` with :data:`MARKER` replaced by the synopsis in a code block."""
    from agentuq_nb.cli import app

    return markdown.replace(MARKER, f"```\n{synopsis(app)}```")


if __name__ == "__main__":  # pragma: no cover
    from agentuq_nb.cli import app

    sys.stdout.write(synopsis(app))
