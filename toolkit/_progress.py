"""tqdm.auto progress bars whose output, once saved in a notebook, tells the final state.

In Jupyter, tqdm shows a widget and, beside it, a text line that the notebook file keeps for readers
without the widget state (GitHub, nbviewer, JupyterLab when it does not save widget state). tqdm
writes that text once, when the bar appears (``0%``). :class:`ProgressBar` displays the bar under a
display id and rewrites that output when the bar closes, so the saved text reads the final count.
"""

from __future__ import annotations

import sys
from typing import Any

from tqdm.auto import tqdm


def _is_notebook_bar(bar_class: type[Any]) -> bool:
    notebook = sys.modules.get("tqdm.notebook")
    return notebook is not None and issubclass(bar_class, notebook.tqdm_notebook)


class ProgressBar:
    """A ``tqdm.auto`` bar (``bar_class`` picks another flavour); :meth:`close` leaves its final state."""

    def __init__(self, total: int, desc: str, unit: str, *, bar_class: type[Any] | None = None) -> None:
        bar_class = bar_class or tqdm
        notebook = _is_notebook_bar(bar_class)
        self.bar: Any = bar_class(
            total=total, desc=desc, unit=unit, **({"display": False} if notebook else {})
        )
        self._output: Any = None
        if notebook:
            from IPython.display import display

            self._output = display(self.bar.container, display_id=True)

    def update(self, n: int = 1, **postfix: Any) -> None:
        self.bar.update(n)
        if postfix:
            self.bar.set_postfix(postfix)

    def close(self) -> None:
        """Close the bar and rewrite its output with the final state."""
        self.bar.close()
        if self._output is not None:
            self._output.update(self.bar.container)
