"""Clean up the <script> list of every page: no duplicate inline scripts, no dead widget state.

1. With Jupyter Book 1.0.4 on Sphinx 7, sphinx-thebe and sphinx-togglebutton each add their inline
   configuration script twice (once with filename ``None``, once with ``''``), so the browser
   reports ``Identifier 'THEBE_JS_URL' has already been declared`` on every page. A script with
   the same source and the same attributes (body included) is kept once.
2. myst-nb embeds the saved ipywidgets state (``application/vnd.jupyter.widget-state+json``) in
   pages whose notebook made a widget. The book does not load the widget manager (it would come
   from a CDN; see ``nb_ipywidgets_js`` in _config.yml), so the state is dead weight — tens of
   kilobytes per widget, a PNG included. It is dropped; the page shows the static fallback figure.
"""

from __future__ import annotations

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def _key(script):
    attrs = getattr(script, "attributes", {}) or {}
    return (getattr(script, "filename", None) or "", tuple(sorted((k, str(v)) for k, v in attrs.items())))


def _clean(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for script in scripts:
        attrs = getattr(script, "attributes", {}) or {}
        if attrs.get("type") == WIDGET_STATE:
            continue
        key = _key(script)
        if key in seen:
            continue
        seen.add(key)
        kept.append(script)
    context["script_files"] = kept


def setup(app):
    app.connect("html-page-context", _clean, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
