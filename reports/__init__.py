"""Report templates (Jinja2), shipped as package data so they are found with importlib.resources.

The report's data is built in :mod:`profiler.report`; this package only holds how it looks.
"""
