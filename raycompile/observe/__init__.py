"""What raycompile did, for every layer: the counters and job records (``stats.py``, from the
declarations of ``raycompile/counters.py``), the progress bar (``progress.py``) and the summary and
trace (``report.py``). Part of the base layer: it imports nothing of raycompile's but the base."""
