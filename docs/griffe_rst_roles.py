"""A griffe extension for the API reference (mkdocs.yml loads it): the package's docstrings cross-reference
with reStructuredText roles (:func:`slug`, :mod:`.offline`, :class:`~agentuq_nb.io.store.rundir.RunDir`), which
Markdown shows with the role's name in front. Each becomes inline code of its target (`slug`, `.offline`, `RunDir`:
a leading ``~`` keeps the last name, as Sphinx shows it). Written here because neither griffe nor mkdocstrings-python
translates Sphinx roles: their "sphinx" docstring style parses field lists (``:param x:``) only."""
import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|mod|class|meth|attr|data|exc|obj|const):`(~?)([^`]+)`")


def plain_target(match: re.Match) -> str:
    shorten, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if shorten else target}`"


class RstRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(plain_target, obj.docstring.value)
