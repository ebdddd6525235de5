"""Temporary: CPU seconds of each test file, over the xdist worker's whole process tree."""
import json, os, time
from collections import defaultdict
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
_data = defaultdict(float)
_wall = defaultdict(float)
_state = {}


def _children_map():
    kids = defaultdict(list)
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    s = f.read()
                ppid = int(s[s.rfind(")") + 2:].split()[1])
                kids[ppid].append(int(d))
            except OSError:
                pass
    return kids


def _cpu(pid, own_children=True):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
        parts = s[s.rfind(")") + 2:].split()
        u, st, cu, cs = (int(x) for x in parts[11:15])
        return (u + st + cu + cs) / TICK
    except OSError:
        return 0.0


def tree_cpu():
    kids = _children_map()
    me = os.getpid()
    total, stack = 0.0, [me]
    while stack:
        p = stack.pop()
        total += _cpu(p)
        stack.extend(kids.get(p, []))
    return total


def pytest_runtest_logstart(nodeid, location):
    _state["c"] = tree_cpu(); _state["w"] = time.monotonic()


def pytest_runtest_logfinish(nodeid, location):
    f = nodeid.split("::")[0]
    _data[f] += tree_cpu() - _state.get("c", 0.0)
    _wall[f] += time.monotonic() - _state.get("w", 0.0)


def pytest_sessionfinish(session):
    out = Path(__file__).resolve().parents[1] / "var" / "cpu"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{os.environ.get('PYTEST_XDIST_WORKER','main')}-{os.getpid()}.json").write_text(
        json.dumps({"cpu": _data, "wall": _wall}))
