"""Emptying the test process's cache without touching anyone else's keys.

On the embedded defaults the cache is locmem (private to the process): ``clear()``. Under
``tests.services_settings`` it is django-redis on a database number shared with every other
checkout running its suite on the same Redis (there are 16 databases, not one per checkout); its
``clear()`` is ``FLUSHDB`` and would delete their keys too (a binding, a throttle counter, a stop
mark lost mid-test). There, only the keys under this process's ``KEY_PREFIX`` are deleted
(``delete_pattern("*")``: django-redis applies the prefix and the version).
"""

from __future__ import annotations


def clear_cache(alias: str = "default") -> None:
    """Empty cache ``alias`` of this test process: every key it wrote, and only those."""
    from django.core.cache import caches

    cache = caches[alias]
    delete_pattern = getattr(cache, "delete_pattern", None)
    if delete_pattern is None:
        cache.clear()
    else:
        delete_pattern("*")
