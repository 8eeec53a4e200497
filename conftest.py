"""Deliberately empty: the shipped suites (suites/) must run from an installed package, where this
file does not exist, so what they need lives in the plugin; the project's own test helpers live in
tests/conftest.py."""
