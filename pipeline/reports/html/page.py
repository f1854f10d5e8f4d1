"""The page shell of the HTML report: head, navigation, inlined assets, escaping helpers.

Every page is one self-contained file: the stylesheet and the script (``assets/``, shipped in
the package) are inlined, and a Content-Security-Policy allows only that script (by its
sha256) and inline styles, so nothing is fetched and injected markup could not run even if
it escaped the escaping. Every piece of transcript text goes through :func:`esc`.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from html import escape
from importlib import resources

NAV = (("index.html", "Overview"), ("sessions.html", "Sessions"), ("policies.html", "Policies"))


def esc(value) -> str:
    """HTML-escape any value (None -> empty), quotes included (safe in attributes too)."""
    if value is None:
        return ""
    return escape(str(value), quote=True)


@functools.cache
def asset(name: str) -> str:
    """The text of ``pipeline/reports/html/assets/<name>`` (shipped in the wheel)."""
    return (resources.files("pipeline.reports.html") / "assets" / name).read_text(encoding="utf-8")


@functools.cache
def _csp() -> str:
    digest = base64.b64encode(hashlib.sha256(asset("report.js").encode("utf-8")).digest()).decode()
    return (f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; "
            "img-src data:; base-uri 'none'; form-action 'none'")


def page(title: str, body: str, *, root: str = "", current: str | None = None) -> bytes:
    """A whole HTML document; ``root`` is the relative path back to the report's top folder
    (``""`` for top-level pages, ``"../../"`` for session pages)."""
    nav = "".join(
        f'<a href="{esc(root + href)}"' + (' class="current"' if href == current else "")
        + f">{esc(label)}</a>" for href, label in NAV)
    text = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta http-equiv="Content-Security-Policy" content="{esc(_csp())}">'
            '<link rel="icon" href="data:,">'
            f"<title>{esc(title)} · ctxlake</title><style>{asset('report.css')}</style></head>\n"
            f'<body><header class="top"><span class="brand">ctxlake</span>{nav}</header>\n'
            f"<main>\n{body}\n</main>\n<script>{asset('report.js')}</script></body></html>\n")
    return text.encode("utf-8")


def table(headers, rows, *, numeric=(), table_id: str | None = None, sortable: bool = False,
          row_attrs=None) -> str:
    """An HTML table; cells are (text, sort value) pairs or plain values, all escaped.
    ``numeric``: column indexes aligned right; ``row_attrs[i]``: extra attributes of row i."""
    classes = "data sortable" if sortable else "data"
    out = [f'<table class="{classes}"' + (f' id="{esc(table_id)}"' if table_id else "") + "><thead><tr>"]
    for index, header in enumerate(headers):
        cls = ' class="num"' if index in numeric else ""
        sort = ' data-sort="asc"' if sortable else ""
        out.append(f"<th{cls}{sort}>{esc(header)}</th>")
    out.append("</tr></thead><tbody>")
    for index, row in enumerate(rows):
        attrs = row_attrs[index] if row_attrs else ""
        out.append(f"<tr{attrs}>")
        for col, cell in enumerate(row):
            cls = ' class="num"' if col in numeric else ""
            if isinstance(cell, tuple):
                shown, value = cell
                out.append(f'<td{cls} data-value="{esc(value)}">{shown}</td>')
            else:
                out.append(f"<td{cls}>{esc(cell)}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)
