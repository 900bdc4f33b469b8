"""Notebook set-up shared by every notebook: how plotly figures are rendered.

Headless runs (``interactive=False``, papermill) render each figure both as plotly's JSON
(what JupyterLab draws) and as HTML with plotly.js embedded once per notebook, so an executed
notebook converted with ``jupyter nbconvert --to html`` keeps its figures, offline (a figure
saved as JSON only is dropped by nbconvert, as measured on this stack). It costs ~5 MB per executed
notebook. Interactive sessions keep plotly's default renderer.
"""

from __future__ import annotations

HEADLESS_RENDERER = "plotly_mimetype+notebook"


def setup_figures(interactive: bool) -> None:
    """Choose the plotly renderer for this notebook (module docstring)."""
    import plotly.io as pio

    if not interactive:
        pio.renderers.default = HEADLESS_RENDERER
