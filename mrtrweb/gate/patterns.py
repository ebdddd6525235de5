"""A server's ``pattern`` (ECMA-262, JSON Schema's dialect), enforced safely: translated to the
``regex`` module's syntax, its compiled size bounded before compiling (:func:`pattern_weight`),
compiled once (:func:`compile_pattern`) and matched within a timeout (:func:`pattern_matches`: a
catastrophic pattern never hangs a worker). Part of the ``requestedSchema`` check
(:mod:`.schema`) and of validating an answer (:mod:`.content`).
"""

from __future__ import annotations

import re
from typing import Any

from .codes import SchemaRefused


#: seconds one ``pattern`` may take on one answer before the answer is refused (ReDoS guard)
PATTERN_TIMEOUT_S = 0.5


#: ECMA-262 ``\\s``: WhiteSpace (TAB, VT, FF, SP, NBSP, ZWNBSP and the Zs category) and LineTerminator
_ECMA_SPACE = "\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"


#: ECMA-262 ``.`` (without the ``s`` flag): any character but a LineTerminator
_ECMA_DOT = "[^\\n\\r\\u2028\\u2029]"


def ecma_to_python(pattern: str) -> str:
    """Translate an ECMA-262 ``pattern`` (JSON Schema's dialect) to the ``regex`` module's syntax:
    ``$`` outside a class matches only at the very end (``\\Z``, not before a final newline),
    ``(?<name>`` becomes ``(?P<name>``, ``.`` excludes every ECMA LineTerminator (``\\r``,
    U+2028, U+2029 too), ``\\s``/``\\S`` are ECMA's Unicode white space (``\\S`` inside a class keeps
    the ASCII meaning). ``\\d``/``\\w``/``\\b`` are made ASCII by the caller's flag."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            escape = pattern[i:i + 2]
            if escape == "\\s":
                out.append(_ECMA_SPACE if in_class else f"[{_ECMA_SPACE}]")
            elif escape == "\\S" and not in_class:
                out.append(f"[^{_ECMA_SPACE}]")
            else:
                out.append(escape)
            i += 2
            continue
        if in_class:
            if ch == "]":
                in_class = False
        elif ch == "[":
            in_class = True
        elif ch == "$":
            out.append("\\Z")
            i += 1
            continue
        elif ch == ".":
            out.append(_ECMA_DOT)
            i += 1
            continue
        elif pattern.startswith("(?<", i) and not pattern.startswith(("(?<=", "(?<!"), i):
            out.append("(?P<")
            i += 3
            continue
        out.append(ch)
        i += 1
    return "".join(out)


_PATTERNS: dict[str, Any] = {}


#: the compiled patterns kept hold at most this total weight (a heavy pattern is large compiled)
_CACHE_MAX_WEIGHT = 1_000_000


_patterns_weight = 0


#: the most a pattern may expand to when compiled: its atoms, each counted once per repetition a
#: bounded quantifier (``{n}``, ``{n,m}``) around it asks for (the ``regex`` module expands those:
#: ``[a-z]{4294967294}`` would exhaust memory, ``(?:a{1000}){1000}`` takes half a second)
MAX_PATTERN_WEIGHT = 100_000


_BOUND = re.compile(r"\{(\d*)(?:,(\d*))?\}")


def pattern_weight(pattern: str, limit: int = MAX_PATTERN_WEIGHT) -> int:
    """An upper estimate of what ``pattern`` expands to when compiled (see
    :data:`MAX_PATTERN_WEIGHT`): alternatives and a sequence add up, a bounded quantifier
    multiplies by its larger bound, ``*``/``+``/``?`` do not. Stops early, returning a value above
    ``limit``, once that is exceeded. Never raises; a malformed pattern is left to the compiler."""
    sums = [0]  # the running weight of each open group, innermost last
    last = 0  # the weight of the previous atom or group (what a quantifier repeats)
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        atom = 1
        if ch == "\\":
            j = i + 2
            if i + 1 < n and pattern[i + 1] in "pPNxuk" and j < n and pattern[j] in "{<":
                close = pattern.find("}" if pattern[j] == "{" else ">", j)
                j = n if close < 0 else close + 1
            i = j
        elif ch == "[":
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i = j + 1
        elif ch == "(":
            sums.append(0)
            last = 0
            i += 1
            continue
        elif ch == ")" and len(sums) > 1:
            atom = max(sums.pop(), 1)
            i += 1
        elif ch == "{" and last:
            m = _BOUND.match(pattern, i)
            if m is None or not (m.group(1) or m.group(2)):
                i += 1
            else:
                digits = [g for g in m.groups() if g]
                if any(len(g) > 9 for g in digits):
                    return limit + 1
                factor = max(int(g) for g in digits)
                sums[-1] += last * (factor - 1) if factor else 0
                last *= max(factor, 1)
                i = m.end()
                if sums[-1] > limit:
                    return limit + 1
                continue
        elif ch in "*+?":
            i += 1
            continue
        else:
            i += 1
        sums[-1] += atom
        last = atom
        if sums[-1] > limit:
            return limit + 1
    return sum(sums)


def compile_pattern(pattern: str, where: str = "pattern"):
    """Compile (and cache) an ECMA-262 pattern with the ``regex`` module.

    Raises:
        SchemaRefused: the pattern is not a regular expression the gate can enforce.
    """
    import regex

    global _patterns_weight
    compiled = _PATTERNS.get(pattern)
    if compiled is None:
        if len(pattern) > 10000:
            raise SchemaRefused(f"{where}: pattern is too long")
        weight = pattern_weight(pattern)
        if weight > MAX_PATTERN_WEIGHT:
            raise SchemaRefused(f"{where}: pattern repeats too much")
        try:
            compiled = regex.compile(ecma_to_python(pattern), flags=regex.ASCII | regex.V0)
        except (regex.error, RecursionError, OverflowError, ValueError, TypeError) as exc:
            raise SchemaRefused(f"{where}: pattern does not compile") from exc
        if len(_PATTERNS) > 1024 or _patterns_weight + weight > _CACHE_MAX_WEIGHT:
            _PATTERNS.clear()
            _patterns_weight = 0
        _PATTERNS[pattern] = compiled
        _patterns_weight += weight
    return compiled


def pattern_matches(pattern: str, value: str, timeout_s: float = PATTERN_TIMEOUT_S) -> bool:
    """ECMA-262 ``pattern`` semantics (unanchored search); False when it takes longer than
    ``timeout_s`` seconds (default :data:`PATTERN_TIMEOUT_S`; a server's catastrophic pattern
    never hangs a worker), or when ``timeout_s`` is not positive."""
    if timeout_s <= 0:
        return False
    try:
        return compile_pattern(pattern).search(value, timeout=timeout_s, concurrent=True) is not None
    except TimeoutError:
        return False
