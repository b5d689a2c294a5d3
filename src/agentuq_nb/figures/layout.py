"""Is a figure legible? Overlapping text and legends over data, measured on the drawn figure.

:func:`layout_problems` draws a figure and returns one sentence per problem:

* **text on text** - any two visible texts (titles, axis labels, tick labels, annotations, figure texts; a legend
  counts as one box) whose drawn outlines overlap. A rotated text is its rotated rectangle, not the upright box
  around it, so slanted tick labels that sit side by side are not counted;
* **a legend or a boxed note over data** - a legend (or a text drawn in a box) inside an axes that covers a data
  point or a stretch of a drawn line, a bar, a band or a marker of that axes.

Written here because matplotlib offers the extents (``get_window_extent``) but no check built on them; the figure
tests (``tests/test_figure_layout.py``) run it over every figure function.
"""
from __future__ import annotations

import math

import numpy as np
from matplotlib.collections import Collection, LineCollection, PathCollection
from matplotlib.legend import Legend
from matplotlib.patches import Patch, Rectangle
from matplotlib.path import Path
from matplotlib.text import Text
from matplotlib.transforms import Bbox

#: pixels an outline is shrunk by before two are compared (texts that merely touch are not overlapping)
TOLERANCE_PX = 1.0
#: spacing of the points checked along a drawn line segment, in pixels
LINE_STEP_PX = 2.0


def _visible(artist) -> bool:
    ax = getattr(artist, "axes", None)
    return bool(artist.get_visible()) and (ax is None or bool(ax.get_visible()))


def drawn_texts(fig) -> list[Text]:
    """The texts ``fig`` draws, in drawing order: recorded from the renderer while the figure is drawn, so tick
    labels outside the view, empty strings and texts of hidden axes are not among them."""
    fig.canvas.draw()  # lay out first (tight_layout, ticks)
    renderer = fig.canvas.get_renderer()
    drawn: dict[int, Text] = {}
    original = renderer.draw_text

    def record(gc, x, y, s, prop, angle, ismath=False, mtext=None):
        if mtext is not None and str(s).strip():
            drawn.setdefault(id(mtext), mtext)
        return original(gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)

    renderer.draw_text = record
    try:
        fig.draw(renderer)
    finally:
        del renderer.draw_text
    return list(drawn.values())


def _text_outline(text: Text, renderer) -> Path | None:
    """The drawn rectangle of ``text`` in display pixels (rotated with it), shrunk by the tolerance."""
    box = text.get_window_extent(renderer)
    if box.width <= 0 or box.height <= 0:
        return None
    angle = text.get_rotation() % 180
    if min(angle % 90, 90 - angle % 90) < 0.5:  # upright or at a right angle: the box is the text
        return _box_path(box.expanded(1, 1).padded(-TOLERANCE_PX))
    rotation = text.get_rotation()
    text.set_rotation(0)
    upright = text.get_window_extent(renderer)
    text.set_rotation(rotation)
    w, h = upright.width / 2 - TOLERANCE_PX, upright.height / 2 - TOLERANCE_PX
    if w <= 0 or h <= 0:
        return None
    cx, cy = (box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2  # a rotated rectangle keeps its centre
    a = math.radians(rotation)
    corners = np.array([[-w, -h], [w, -h], [w, h], [-w, h], [-w, -h]])
    rot = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
    return Path(corners @ rot.T + [cx, cy], closed=True)


def _box_path(box: Bbox) -> Path:
    return Path([[box.x0, box.y0], [box.x1, box.y0], [box.x1, box.y1], [box.x0, box.y1], [box.x0, box.y0]],
                closed=True)


def _describe(text: Text) -> str:
    s = text.get_text().replace("\n", " ")
    return repr(s if len(s) <= 40 else s[:37] + "…")


def _legends(fig) -> list[Legend]:
    return [leg for leg in fig.findobj(Legend) if _visible(leg)]


def _describe_legend(leg: Legend) -> str:
    return f"legend ({', '.join(_describe(t) for t in leg.get_texts()[:2])}…)"


def _boxes(fig, texts: list[Text]) -> list[tuple[str, Path]]:
    """(description, outline) of every drawn text (``texts``, :func:`drawn_texts`) and legend of ``fig``, a legend as
    one box."""
    renderer = fig.canvas.get_renderer()
    legends = _legends(fig)
    in_legend = {id(t) for leg in legends for t in [*leg.get_texts(), leg.get_title()]}
    out = []
    for leg in legends:
        box = leg.get_window_extent(renderer)
        if box.width > 0 and box.height > 0:
            out.append((_describe_legend(leg), _box_path(box.padded(-TOLERANCE_PX))))
    for text in texts:
        if id(text) not in in_legend:
            outline = _text_outline(text, renderer)
            if outline is not None:
                out.append((f"text {_describe(text)}", outline))
    return out


def text_overlaps(fig, texts: list[Text] | None = None) -> list[str]:
    """One sentence per pair of drawn texts (or legends) of ``fig`` whose outlines overlap (``texts``: what
    :func:`drawn_texts` gave for ``fig`` as it is now, else it draws the figure to find them)."""
    boxes = _boxes(fig, drawn_texts(fig) if texts is None else texts)
    if len(boxes) < 2:
        return []
    ext = np.array([[e.x0, e.y0, e.x1, e.y1] for e in (p.get_extents() for _, p in boxes)])
    # candidate pairs: upright extents that overlap (vectorized); then the exact outlines
    close = ((ext[:, None, 0] < ext[None, :, 2]) & (ext[None, :, 0] < ext[:, None, 2])
             & (ext[:, None, 1] < ext[None, :, 3]) & (ext[None, :, 1] < ext[:, None, 3]))
    found = []
    for i, j in zip(*np.nonzero(np.triu(close, k=1))):
        (a, pa), (b, pb) = boxes[i], boxes[j]
        if pa.intersects_path(pb, filled=True):
            found.append(f"{a} overlaps {b}")
    return found


def _points_along(xy: np.ndarray, connected: bool) -> np.ndarray:
    """The vertices of a drawn line and, where it is connected, points every few pixels along its segments."""
    if not connected or len(xy) < 2:
        return xy[np.isfinite(xy).all(axis=1)]
    pieces = [xy[:1]]
    for p, q in zip(xy[:-1], xy[1:]):
        if not (np.isfinite(p).all() and np.isfinite(q).all()):
            pieces.append(q[None, :])
            continue
        steps = max(1, int(np.hypot(*(q - p)) / LINE_STEP_PX))
        t = np.linspace(0, 1, steps + 1)[1:, None]
        pieces.append(p + t * (q - p))
    pts = np.vstack(pieces)
    return pts[np.isfinite(pts).all(axis=1)]


def _data_marks(ax) -> list[tuple[str, np.ndarray | Path]]:
    """What an axes draws as data, in display pixels: points along its lines, its markers, and the outlines of
    its bars, bands and other patches."""
    marks = []
    for line in ax.lines:
        if not _visible(line) or len(line.get_xydata()) == 0:
            continue
        xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
        connected = line.get_linestyle() not in ("None", "", " ", "none")
        marks.append((f"line {line.get_label()!r}", _points_along(xy, connected)))
    for coll in ax.collections:
        if not _visible(coll) or not isinstance(coll, Collection):
            continue
        if isinstance(coll, PathCollection) and len(coll.get_offsets()):
            xy = coll.get_offset_transform().transform(np.asarray(coll.get_offsets(), dtype=float))
            marks.append((f"markers {coll.get_label()!r}", xy[np.isfinite(xy).all(axis=1)]))
        elif isinstance(coll, LineCollection):
            for seg in coll.get_segments():
                xy = coll.get_transform().transform(np.asarray(seg, dtype=float))
                marks.append((f"lines {coll.get_label()!r}", _points_along(xy, True)))
        else:
            for path in coll.get_paths():
                marks.append((f"area {coll.get_label()!r}", coll.get_transform().transform_path(path)))
    for patch in ax.patches:
        if _visible(patch) and isinstance(patch, Patch):
            if isinstance(patch, Rectangle) and (patch.get_width() == 0 or patch.get_height() == 0):
                continue
            marks.append((f"patch {patch.get_label()!r}", patch.get_transform().transform_path(patch.get_path())))
    return marks


def legend_overlaps(fig, texts: list[Text] | None = None) -> list[str]:
    """One sentence per legend or boxed note of ``fig`` that covers data drawn in its axes (``texts`` as for
    :func:`text_overlaps`)."""
    texts = drawn_texts(fig) if texts is None else texts
    renderer = fig.canvas.get_renderer()
    covers = [(_describe_legend(leg), leg.get_window_extent(renderer), leg.axes) for leg in _legends(fig)
              if leg.axes is not None]
    covers += [(f"boxed note {_describe(t)}", t.get_window_extent(renderer), t.axes) for t in texts
               if t.get_bbox_patch() is not None and t.axes is not None]
    found = []
    for what, box, ax in covers:
        area = Bbox.intersection(box.padded(-TOLERANCE_PX), ax.get_window_extent(renderer))
        if area is None or area.width <= 0 or area.height <= 0:
            continue  # outside the axes: off the data
        for label, mark in _data_marks(ax):
            if isinstance(mark, Path):
                hit = mark.intersects_bbox(area, filled=True)
            else:
                hit = bool(((mark[:, 0] > area.x0) & (mark[:, 0] < area.x1) & (mark[:, 1] > area.y0)
                            & (mark[:, 1] < area.y1)).any())
            if hit:
                found.append(f"{what} covers {label}")
    return found


def layout_problems(fig) -> list[str]:
    """Every overlapping pair of texts and every legend or note over data in ``fig`` (empty: legible). The figure is
    drawn once for both checks (the drawing is most of their time)."""
    texts = drawn_texts(fig)
    return text_overlaps(fig, texts) + legend_overlaps(fig, texts)
