"""The Dash drift explorer: ``create_app(run_dir)`` and one module per page.

Adding a page: write ``aclarena/dashboard/pages/<name>.py`` with

* ``PAGE = {"path": "/<name>", "name": "<Title>", "order": <int>}``;
* ``layout(**query) -> Component``: built per request; find the run with
  :func:`aclarena.dashboard.data.current_run` and read only what the first view needs;
* ``register_callbacks(app, run_dir)``: thin ``app.callback`` wrappers around module-level
  functions that take ``run_dir`` first (tests call those directly), which read slices of
  the store (:func:`aclarena.dashboard.data.reader`) and call builders in
  ``aclarena.figures.<topic>``;

prefix every component id with the page name (``tokens-checkpoint``), and add the module
name to :data:`aclarena.dashboard.app.PAGES`. Callbacks are registered per app (not with
the global ``dash.callback``) so that several apps can live in one process.

The app binds 127.0.0.1 unless told otherwise, never runs in debug mode unless asked, and
serves only its own static assets: nothing from the run folder is served as a file.
"""

from aclarena.dashboard.app import create_app

__all__ = ["create_app"]
