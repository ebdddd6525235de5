"""round_hop's cache of built hops: module-level phases built once, nothing made per call kept."""

from __future__ import annotations

import contextvars
import functools

from mrtrweb.operations import hops

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("review2_var", default="")


def _phase(x):
    return x, VAR.get()


def test_a_module_level_phase_is_built_once():
    assert hops.round_hop(_phase) is hops.round_hop(_phase)
    assert _phase in hops._hops


def test_closures_partials_and_methods_are_not_kept():
    before = len(hops._hops)

    def local(x):
        return x

    class C:
        def m(self, x):
            return x

    for _ in range(3):
        hops.round_hop(local)
        hops.round_hop(functools.partial(_phase))
        hops.round_hop(C().m)
    assert len(hops._hops) == before


def test_a_per_call_wrapper_with_a_copied_qualname_is_not_kept():
    """functools.wraps copies the module-level __qualname__, so each
    new wrapper object would pass a '<locals>' test: it must not be kept for the process's life."""
    before = len(hops._hops)
    for _ in range(3):
        @functools.wraps(_phase)
        def wrapper(x):
            return _phase(x)

        hops.round_hop(wrapper)
    assert len(hops._hops) == before


async def test_each_call_runs_in_a_copy_of_its_callers_context():
    hop = hops.round_hop(_phase)
    VAR.set("a")
    assert await hop(1) == (1, "a")
    VAR.set("b")
    assert await hop(2) == (2, "b")  # the cached wrapper did not capture the first call's context
