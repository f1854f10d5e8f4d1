"""The static HTML report over the lake (``ctxlake report html``): see :mod:`pipeline.reports.html.build`.

Pages are self-contained (stylesheet and script from ``assets/`` inlined, charts as inline
SVG from :mod:`pipeline.reports.html.svg`), so the report opens from ``file://`` with no network.
"""

from pipeline.reports.html.build import DEFAULT_POLICY, HtmlSummary, render_html, session_slug

__all__ = ["render_html", "HtmlSummary", "session_slug", "DEFAULT_POLICY"]
