"""What ``fsguard report`` and ``fsguard scan`` share: reading inputs, launcher prefixes, path patterns, tables.

Everything here is standard library only, and streams. An input is read in blocks of whole lines. A block with nothing
of interest is skipped by a substring search, never split into lines.
"""
