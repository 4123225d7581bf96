"""Shared test configuration for the harness's own tests."""

# Upstream-style fixture files are inputs to end-to-end runs, not tests of this project.
collect_ignore_glob = ["fixtures/*"]
