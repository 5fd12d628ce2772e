"""Leaf: the one place the version lives. Hatch reads it for the wheel; records and reports print it."""

__version__ = "0.1.0"
