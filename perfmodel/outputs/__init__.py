"""Outputs for people who do not run the tool: an HTML report, a what-if workbook, sweeps.

- :mod:`.report` renders one self-contained HTML file (jinja2 templates in ``templates/``, charts as
  inline SVG from :mod:`.charts`).
- :mod:`.workbook` writes an xlsx whose numbers are live formulas generated from the cost model code
  (``time_op(..., xp=XL)``), and flat CSV tables.
- :mod:`.sweep` evaluates a grid of hardware figures and scenario values, vectorised.
- :mod:`.sensitivity` moves each hardware figure by +-20% and re-projects.
- :mod:`perfmodel.cli.outputs` adds ``report``, ``export`` and ``sweep`` to the CLI.

Nothing here is imported by the CLI at start-up.
"""
