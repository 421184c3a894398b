"""Did a change of the code change its speed? ``speed.py`` for two source trees, in one run.

    git worktree add ../before <commit>
    python benchmarks/speed_two_trees.py --before ../before --data-dir ../shared/data \\
        --rounds 3 -- --archs mlp,cnn --members 1,8,32 --methods baseline,l2_init,cbp,redo

Runs ``benchmarks/speed.py`` (this tree's script, with the given arguments after ``--``) once per
round for each tree — the ``--before`` checkout's ``src`` and this one's, alternating, so that
the drift of a shared machine's speed falls on both alike — each round a fresh process with
``--repeats 1``, one torch thread. Prints every figure of both trees (member-samples/s, the best
of the rounds) and their ratio, after/before; the plain-loop rows (no plasticlab code) show what
the machine's drift alone amounts to.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def one_round(src: Path, data_dir: str | None, extra: list[str], out: Path) -> dict:
    """One ``speed.py`` round with the package of ``src`` on the path: row key → samples/s."""
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{HERE}")
    cmd = [sys.executable, str(HERE / "speed.py"), "--repeats", "1", "--csv", str(out), *extra]
    if data_dir:
        cmd += ["--data-dir", data_dir]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    with out.open() as f:
        return {(r["arch"], r["method"], int(r["members"])): float(r["samples_per_s"])
                for r in csv.DictReader(f)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the other checkout (its src/ is used)")
    parser.add_argument("--data-dir")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("extra", nargs="*", help="speed.py's own arguments (after --)")
    args = parser.parse_args()
    trees = {"before": Path(args.before).resolve() / "src", "after": ROOT / "src"}
    print(f"speed.py for two trees, {args.rounds} rounds alternating, one torch thread each; "
          f"before {trees['before']}, after {trees['after']}; speed.py {' '.join(args.extra)}",
          flush=True)
    best: dict[str, dict] = {name: {} for name in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, src in trees.items():
                rates = one_round(src, args.data_dir, args.extra, Path(tmp) / f"{name}.csv")
                for key, rate in rates.items():
                    best[name][key] = max(best[name].get(key, 0.0), rate)
            print(f"round {r + 1}/{args.rounds} done", flush=True)
    print(f"\n{'arch':<5}{'row':<30}{'K':>4}{'before':>14}{'after':>14}{'after/before':>14}")
    for key in best["before"]:
        if key in best["after"]:
            a, b = best["before"][key], best["after"][key]
            print(f"{key[0]:<5}{key[1]:<30}{key[2]:>4}{a:>14,.0f}{b:>14,.0f}{b / a:>14.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
