"""A token-level view of one trajectory: each token coloured by its NLL, top-k on hover (HTML)."""
from __future__ import annotations

import html
import math
from pathlib import Path

import pandas as pd

from agentuq_nb.io.atomic import atomic_write_text
from agentuq_nb.io.outputs import check_output_file

#: the tag that marks a page :meth:`TokenView.save` wrote (a later save replaces such a page, and no other file)
PAGE_MARK = "<meta name='generator' content='agentuq_nb token view'>"
#: how the page began before it carried the mark
OLD_PAGE_START = "<!doctype html><meta charset='utf-8'><body><div style='font-family:monospace;"
ROLE_LABEL = {"assistant": "agent", "user": "user", "tool": "tool"}


class TokenView:
    """Rendered HTML; shows itself in Jupyter and can be saved beside the figures."""

    def __init__(self, body: str):
        self.html = body

    def _repr_html_(self) -> str:
        return self.html

    def save(self, path: str | Path, force: bool = False) -> Path:
        """Write the view as a standalone page; an existing file is replaced only when it is such a page (or with
        ``force``), never a folder, a link, a special file or a run folder's own file (:mod:`agentuq_nb.io.outputs`)."""
        path = check_output_file(path, command="TokenView.save", option="path", what="HTML page",
                                 made_before=(PAGE_MARK.encode(), OLD_PAGE_START.encode()), force=force,
                                 example="tokens.html")
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, f"<!doctype html><meta charset='utf-8'>{PAGE_MARK}<body>{self.html}</body>")
        return path


def _colour(nll: float, scale: float) -> str:
    # white (certain) → orange-red (surprising); NLL clipped at `scale` nats
    if nll is None or not math.isfinite(nll):
        return "#dddddd"
    t = max(0.0, min(1.0, nll / scale))
    r, g, b = 255, int(255 - 160 * t), int(255 - 255 * t)
    return f"rgb({r},{g},{b})"


def _tooltip(row) -> str:
    lines = [f"NLL {-row.chosen_logprob:.3f}  p={row.chosen_prob:.3f}" if pd.notna(row.chosen_logprob) else "no log-prob"]
    for tok, lp in zip(row.topk_tokens if row.topk_tokens is not None else [], row.topk_logprobs if row.topk_logprobs is not None else []):
        lines.append(f"{tok!r}: {math.exp(lp):.3f}")
    return html.escape("\n".join(lines), quote=True)


def token_view(tokens: pd.DataFrame, title: str = "", nll_scale: float = 4.0, max_tokens: int = 4000) -> TokenView:
    """HTML of a trajectory's tokens (rows of one trajectory and one scorer), message by message."""
    tokens = tokens.sort_values(["message_idx", "token_idx"], kind="stable").head(max_tokens)
    parts = ["<div style='font-family:monospace;font-size:12px;line-height:1.7'>"]
    if title:
        parts.append(f"<h4 style='font-family:sans-serif'>{html.escape(title)}</h4>")
    parts.append(
        "<div style='font-family:sans-serif;font-size:11px;margin-bottom:6px'>colour = token NLL "
        f"(white 0 → red ≥ {nll_scale:g} nats); hover a token for its top-k alternatives</div>"
    )
    for (msg_idx, role), group in tokens.groupby(["message_idx", "role"], sort=False):
        nll = -group["chosen_logprob"]
        parts.append(
            f"<div style='margin:4px 0;padding:4px;border-left:3px solid #999'>"
            f"<b style='font-family:sans-serif'>[{int(msg_idx)}] {ROLE_LABEL.get(role, role)}</b> "
            f"<span style='font-family:sans-serif;color:#666'>mean NLL {nll.mean():.2f} over {len(group)} tokens</span><br>"
        )
        for row in group.itertuples(index=False):
            text = html.escape(str(row.token)).replace("\n", "↵<br>")
            colour = _colour(-row.chosen_logprob if pd.notna(row.chosen_logprob) else None, nll_scale)
            parts.append(f"<span title=\"{_tooltip(row)}\" style='background:{colour};white-space:pre-wrap'>{text}</span>")
        parts.append("</div>")
    parts.append("</div>")
    return TokenView("".join(parts))
