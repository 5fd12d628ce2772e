"""What tests and benchmarks share (``bench/`` imports it too): environments, venvs, the CLI, ports, records.

One definition each, so a test and a benchmark never start interpreters, build venvs or read records in two
different ways: ``env`` (clean environments, ``TORCHRUN_ENV``), ``venvs`` (the wheel, fresh venvs with it),
``cli`` (``python -m fsguard ...``), ``net`` (``free_port``), ``records`` (reading records back).
"""
