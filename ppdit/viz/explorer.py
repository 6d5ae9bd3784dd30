"""An explorer: widgets above one picture that redraws when they change (lessons 03 and 10).

Two things a plain ``interactive_output`` gets wrong in JupyterLab, and this gets right:

* **Races.** JupyterLab 4.4+ with ipykernel 7 delivers widget messages on kernel *subshells*
  (threads): two quick changes redraw at once and a stale picture stays stacked under the new
  one (pyplot is not thread-safe either). Here a redraw renders PNG bytes under a lock, from
  the controls' *current* values, and replaces the output in one assignment; a change arriving
  during a redraw is folded into the next one.
* **The first open.** Without a live kernel a notebook shows the text a widget stores beside its
  view (normally ``VBox(children=(HBox(...``); the explorer's text says what it is instead."""

from __future__ import annotations

import base64
import io
import threading
from collections.abc import Callable
from functools import cache

REPR_CHARS = 110  # ipywidgets cuts a widget's text/plain there (what a kernel-less view shows)


@cache
def _explorer_class():
    """``Explorer(VBox)``, defined on first use: only a live kernel needs ipywidgets."""
    import ipywidgets as w

    class Explorer(w.VBox):
        """Rows of controls above one output; ``repr`` is what a kernel-less viewer shows."""

        def __init__(self, *args, summary: str = "", **kwargs):
            super().__init__(*args, **kwargs)
            self._summary = summary
            if len(repr(self)) > REPR_CHARS:  # a viewer would cut the instruction off
                raise ValueError(f"explorer summary {summary!r}: {len(repr(self))} characters "
                                 f"with its instruction, more than ipywidgets shows "
                                 f"({REPR_CHARS})")

        def __repr__(self) -> str:
            return f"{self._summary}: run the cells above to use it"

    return Explorer


def figure_output(fig) -> dict:
    """A matplotlib figure as one notebook output (PNG), drawn without pyplot's global state;
    the figure is closed."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight", dpi=fig.dpi)
    plt.close(fig)
    data = {"image/png": base64.b64encode(buf.getvalue()).decode("ascii"),
            "text/plain": "<Figure>"}
    return {"output_type": "display_data", "data": data, "metadata": {}}


def text_output(text: str) -> dict:
    return {"output_type": "stream", "name": "stdout", "text": text + "\n"}


def make_explorer(controls: dict, draw: Callable[..., object], *, rows: tuple[int, ...],
                  summary: str, errors: tuple[type[Exception], ...] = (ValueError,)):
    """Controls (name -> widget with ``.value``) laid out in rows of ``rows`` widgets each,
    above the figure ``draw(**values)`` returns; an error in ``errors`` prints as one line
    ("not possible: ..."). ``summary`` names the explorer for viewers without a kernel."""
    import ipywidgets as w

    out, lock = w.Output(), threading.Lock()
    asked = [0, 0]  # [changes seen, changes drawn]: the draw after the last change wins

    def redraw(_=None) -> None:
        asked[0] += 1
        with lock:  # callbacks may arrive on several subshell threads at once
            while asked[1] < asked[0]:
                asked[1] = asked[0]
                values = {name: c.value for name, c in controls.items()}
                try:
                    shown = figure_output(draw(**values))
                except errors as err:
                    shown = text_output(f"not possible: {err}")
                out.outputs = (shown,)  # one assignment: never two pictures at once

    for c in controls.values():
        c.observe(redraw, names="value")
    redraw()
    widgets, boxes, start = list(controls.values()), [], 0
    for n in rows:
        boxes.append(w.HBox(widgets[start:start + n]))
        start += n
    return _explorer_class()([*boxes, out], summary=summary)
