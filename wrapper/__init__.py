"""Inductor integration, above ``kernels/`` and beside ``orchestrator/`` (which it never imports):

- ``compat/``: the adapter, every touch point with Inductor's and Triton's private API;
- ``jobs.py``: jobs made from Inductor's compile calls, keyed once (``cache/keys.py``);
- ``hooks.py``: the Router that sends those jobs to the cache, the farm or the stock pools;
- ``codegen.py`` / ``runtime.py``: the output module the farm's codegen writes, and what it imports;
- ``autotune.py`` / ``module_cache.py``: autotune on the GPU actors; FX-graph and AOTAutograd
  entries in the farm's tiers;
- ``frames.py``: Dynamo precompile entries (compiled frames) in the farm's tiers, so a warm process
  skips Dynamo and AOTAutograd (``settings.dynamo_cache``).
"""
