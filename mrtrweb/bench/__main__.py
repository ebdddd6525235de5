"""``python -m mrtrweb.bench [run] [--quick] [--only a,b] [--out DIR] [--no-report]`` runs the
benchmarks and renders the report; ``python -m mrtrweb.bench report [--in DIR] [--docs DIR]``
only renders ``docs/benchmarks/`` from the JSON files. See :mod:`mrtrweb.bench`."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import BENCHMARKS, run_suite
from .common import DEFAULT_OUT, DOCS_DIR


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = "run"
    if argv and argv[0] in ("run", "report"):
        command = argv.pop(0)
    parser = argparse.ArgumentParser(prog="python -m mrtrweb.bench " + command)
    if command == "report":
        parser.add_argument("--in", dest="inp", type=Path, default=DEFAULT_OUT, help="JSON results (var/bench)")
        parser.add_argument("--docs", type=Path, default=DOCS_DIR, help="where README.md and plots go")
        args = parser.parse_args(argv)
        from .report import render

        results = [p for p in sorted(args.inp.glob("*.json")) if p.stem != "machine"]
        if not results:  # never overwrite the committed report with an empty one
            print(f"no benchmark results in {args.inp}: run `python -m mrtrweb.bench` (or ./dev bench) first; "
                  "the report was left as it is", file=sys.stderr)
            return 2
        path = render(args.inp, args.docs)
        print(f"report: {path}")
        return 0
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run of every benchmark")
    parser.add_argument("--tiny", action="store_true", help="smallest sizes (the test suite's smoke test)")
    parser.add_argument("--only", default="", help=f"comma-separated subset of {','.join(BENCHMARKS)}")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the JSON results go (var/bench)")
    parser.add_argument("--docs", type=Path, default=DOCS_DIR, help="where the report goes (docs/benchmarks)")
    parser.add_argument("--no-report", action="store_true", help="do not render the report")
    parser.add_argument("--budget-s", type=float, default=580.0,
                        help="time budget of the suite in seconds (default 580, so that run + report stay under "
                             "10 minutes): the pending benchmark skips an N that would not fit; 0 = no budget")
    parser.add_argument("--pending-sizes", default="",
                        help="comma-separated N of the pending-capacity levels (default 100,1000,5000; quick 50,200)")
    args = parser.parse_args(argv)
    only = [b for b in args.only.split(",") if b] or list(BENCHMARKS)
    unknown = set(only) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    t0 = time.monotonic()
    run_suite(only, out_dir=args.out, quick=args.quick or args.tiny, tiny=args.tiny, budget_s=args.budget_s,
              pending_sizes=[int(x) for x in args.pending_sizes.split(",") if x] or None)
    if not args.no_report:
        from .report import render

        print(f"report: {render(args.out, args.docs)}")
    print(f"total {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
