"""MkDocs hook: the command line page's synopsis, made from the commands as the site is built
(:func:`agentuq_nb.cli_synopsis.fill_synopsis`), so that a new step's command is documented without an edit."""
from agentuq_nb.cli_synopsis import MARKER, fill_synopsis


def on_page_markdown(markdown: str, **_) -> str:
    return fill_synopsis(markdown) if MARKER in markdown else markdown
