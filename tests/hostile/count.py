"""Run issue 27's hostile corpus and count it by door.

    python tests/hostile/count.py                  # the whole corpus: the table of docs/hostile.md, then failures
    python tests/hostile/count.py --sample         # the default tier's sample only
    python tests/hostile/count.py --door flags     # one door
    python tests/hostile/count.py --case "flags | project --isl=nan"   # one case, with what it printed
    python tests/hostile/count.py --list           # the case ids, no run
    python tests/hostile/count.py --jobs 4         # in four processes
    python tests/hostile/count.py --jobs 2 --doc   # and write the table into docs/hostile.md

Each case runs in its own temporary folder (tests/hostile/corpus.py says how cases are run and judged).
"""
from __future__ import annotations

import argparse
import multiprocessing
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import corpus as C  # noqa: E402


def _run(args: tuple[int, str]):
    i, base = args
    folder = Path(base) / f"c{i}"
    try:
        o = C.run_case(_CASES[i], folder, timeout=_TIMEOUT)
        got = (o.verdict, o.why, o.rc, o.stderr[-4000:], o.seconds)  # plain values travel between processes
    except BaseException as e:  # noqa: BLE001 - the runner itself must survive any case
        got = ("fail", f"the runner stopped: {type(e).__name__}: {e}", "runner", "", 0.0)
    shutil.rmtree(folder, ignore_errors=True)
    return i, got


_CASES: tuple = ()
_TIMEOUT = 60.0


def run_all(cases, jobs: int = 1, timeout: float = 60.0, progress: bool = False) -> list:
    """Every case's Outcome, in order; ``jobs`` > 1 runs them in that many forked processes (a process that dies
    fails its case by name instead of hanging the run)."""
    global _CASES, _TIMEOUT
    _CASES, _TIMEOUT = tuple(cases), timeout
    out: list = [None] * len(_CASES)
    t0 = time.perf_counter()

    def done(n: int, i: int, got) -> None:
        out[i] = C.Outcome(_CASES[i], got[0], got[1], got[2], got[3], "", got[4])
        if progress and n % 200 == 0:
            print(f"  {n}/{len(_CASES)} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="hostile-") as base:
        if jobs > 1:
            with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
                futures = {pool.submit(_run, (i, base)): i for i in range(len(_CASES))}
                for n, f in enumerate(as_completed(futures), 1):
                    i = futures[f]
                    try:
                        done(n, *f.result())
                    except BrokenProcessPool as e:
                        done(n, i, ("fail", f"the process running it died ({e})", "died", "", 0.0))
        else:
            for i in range(len(_CASES)):
                done(i + 1, *_run((i, base)))
    return out


DOC = C.ROOT / "docs" / "hostile.md"
# (not docs/tools/regenerate.py's "<!-- tag: begin -->" markers: this table is checked by tests/test_hostile_corpus.py)
BEGIN = "<!-- hostile-counts, written by python tests/hostile/count.py --doc -->\n"
END = "\n<!-- /hostile-counts -->"


def write_doc(table: str) -> None:
    text = DOC.read_text(encoding="utf-8")
    a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
    DOC.write_text(text[:a] + table + text[b:], encoding="utf-8")
    print(f"wrote the table into {DOC.relative_to(C.ROOT)}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sample", action="store_true", help="the default tier's sample only")
    ap.add_argument("--door", action="append", choices=C.DOORS, help="only this door (repeatable)")
    ap.add_argument("--case", action="append", help="only this case id (repeatable); prints its output")
    ap.add_argument("--list", action="store_true", help="list the case ids and stop")
    ap.add_argument("--jobs", type=int, default=1, help="processes (default 1)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a case may run (default 60)")
    ap.add_argument("--slowest", type=int, default=0, help="also list the N slowest cases")
    ap.add_argument("--doc", action="store_true", help="write the table into docs/hostile.md (whole corpus only)")
    args = ap.parse_args(argv)

    cases = C.sample() if args.sample else C.corpus()
    if args.door:
        cases = tuple(c for c in cases if c.door in args.door)
    if args.case:
        wanted = set(args.case)
        cases = tuple(c for c in C.corpus() if c.id in wanted)
        missing = wanted - {c.id for c in cases}
        if missing:
            print(f"no such case: {sorted(missing)}", file=sys.stderr)
            return 2
    if args.list:
        for c in cases:
            print(c.id)
        return 0
    t0 = time.perf_counter()
    outcomes = run_all(cases, jobs=args.jobs, timeout=args.timeout, progress=not args.case)
    if args.case:
        for o in outcomes:
            print(f"[{o.case.id}] {o.verdict} {o.why}\n  argv: {' '.join(o.case.argv)}\n  exit: {o.rc}\n"
                  f"--- stderr\n{o.stderr}")
        return 0
    table = C.markdown(C.counts(outcomes))
    print(table)
    if args.doc:
        if args.sample or args.door:
            print("--doc needs the whole corpus", file=sys.stderr)
            return 2
        write_doc(table)
    print(f"\n{len(outcomes):,} cases in {time.perf_counter() - t0:.0f} s")
    fails = [o for o in outcomes if o.verdict == "fail"]
    known = [o for o in fails if o.case.id in C.KNOWN]
    new = [o for o in fails if o.case.id not in C.KNOWN]
    fixed = sorted(set(C.KNOWN) & {o.case.id for o in outcomes if o.verdict != "fail"})
    if known:
        print(f"\nknown failures ({len(known)}):")
        reasons: dict[str, list] = {}
        for o in known:
            reasons.setdefault(C.KNOWN[o.case.id], []).append(o)
        for reason, some in reasons.items():
            print(f"  {len(some)} because {reason}:")
            for o in some:
                print(f"    [{o.case.id}] {o.why[:140]}")
    if fixed:
        print(f"\nknown failures that now pass ({len(fixed)}): remove them from KNOWN in tests/hostile/corpus.py")
        for i in fixed:
            print(f"  [{i}]")
    if new:
        print(f"\nfailures ({len(new)}):")
        for o in new:
            print(o.report())
    took = {}
    for o in outcomes:
        took[o.case.door] = took.get(o.case.door, 0.0) + o.seconds
    print("\nseconds by door (the sum over cases): " + ", ".join(f"{d} {t:.0f}" for d, t in took.items()))
    if args.slowest:
        print(f"\nslowest {args.slowest}:")
        for o in sorted(outcomes, key=lambda o: -o.seconds)[: args.slowest]:
            print(f"  {o.seconds:6.2f} s  [{o.case.id}]")
    return 1 if new or fixed else 0


if __name__ == "__main__":
    sys.exit(main())
