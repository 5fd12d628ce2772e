"""The ``fsguard`` command line: status, report, scan, demo."""
