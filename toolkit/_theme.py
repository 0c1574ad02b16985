"""Colours of the HTML the toolkit renders: JupyterLab's CSS variables, so that light and dark themes
both read well, with the light theme's values as fallbacks where the variables are not defined
(GitHub, nbviewer, VS Code)."""

from __future__ import annotations

TEXT = "var(--jp-ui-font-color1, rgba(0,0,0,.87))"
MUTED = "var(--jp-ui-font-color2, rgba(0,0,0,.54))"
BORDER = "var(--jp-border-color2, #e0e0e0)"
SURFACE = "var(--jp-layout-color1, white)"
ERROR = "var(--jp-error-color1, #d32f2f)"
SUCCESS = "var(--jp-success-color1, #388e3c)"
WARN = "var(--jp-warn-color1, #f57c00)"
BRAND = "var(--jp-brand-color1, #1976d2)"
ON_COLOR = "var(--jp-ui-inverse-font-color1, white)"  # text on a badge filled with one of the above


def tint(color: str, percent: int) -> str:
    """``color`` mixed with transparency: a background that keeps the theme's text readable."""
    return f"color-mix(in srgb, {color} {percent}%, transparent)"
