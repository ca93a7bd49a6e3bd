"""Dashboard pages: one module each (see aclarena/dashboard/__init__.py)."""
