"""``fsguard demo``'s parts: the job every rank runs (``workload``) and a minimal launcher (``launch``).

Standard library only: the demo must run right after ``pip install``, without torch and without a GPU.
"""
