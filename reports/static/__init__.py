"""Styles and scripts copied next to every HTML report (package data)."""
