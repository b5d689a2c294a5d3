"""Utilities beside (below) the layers: every layer and ``distributed`` may import them, they import none.

* :mod:`.offline` - environment defaults that keep a run offline (litellm price list, HF hub);
* :mod:`.naming` - :func:`slug`, the one way a value becomes part of a file or key name;
* :mod:`.redaction` - :func:`redact` / :func:`find_secret`, the one policy for API keys;
* :mod:`.collector` - :func:`fewer_collections`, for loops that allocate millions of short-lived objects;
* :mod:`.progress` - :func:`progress_bar`, the one way a long loop shows its count and time left (stderr);
* :mod:`.wording` - :func:`counted` / :func:`agreeing`, a count and its noun or verb in generated prose.
"""
