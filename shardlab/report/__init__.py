"""Reporting: figures (plotly), later widgets and HTML reports."""
