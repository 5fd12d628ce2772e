"""What ``fsguard report`` and ``fsguard scan`` share: reading inputs, launcher prefixes, path patterns, tables.

Everything here is standard library only and streams: an input is read in blocks of whole lines, and a
block with nothing of interest is skipped by a substring search without splitting it into lines.
"""
