"""matplotlib for every plot perflab draws: imported lazily, one message when it is missing, and figures
saved through perflab.outputs (never over an existing file without force, never over an input)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from perflab.errors import PerflabError
from perflab.outputs import atomic_path

# perflab depends on matplotlib; this is for an install that lost it (pip --no-deps, a broken env).
PLOTS_NEED = "drawing plots needs matplotlib, which perflab's install brings: python3 -m pip install 'matplotlib>=3.7'"


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (files only, no window), or the one-line error."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PerflabError(PLOTS_NEED) from None
    return plt


def save_figure(fig: Any, out: str | Path, *, force: bool = False, inputs: Iterable[Any] = (), **savefig: Any) -> Path:
    """Write the figure (format from the suffix) whole, then close it."""
    try:
        with atomic_path(out, force=force, inputs=inputs) as tmp:
            fig.savefig(tmp, format=Path(out).suffix.lstrip(".").lower() or None, **savefig)
    finally:
        pyplot().close(fig)
    return Path(out)
