"""``plasticlab reproduce`` and ``plasticlab export``: the paper's studies, run, reported and
exported for ``docs/reproduction/`` in one resumable command."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

STUDY_SCALES = {
    "best-random_label_mnist-adam": 0.2,
    "best-random_label_mnist-sgd": 0.2,
    "best-random_label_cifar-adam": 0.02,
}
"""The default ``--scale`` of studies too long to run at full length on a CPU (SPEC §3:
Random Label problems train 30,000 steps per task); every other study runs at full length."""


def machine() -> dict:
    """Where a study ran: OS, processor, cores, Python and torch versions."""
    import torch

    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cores": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def _sweep_args(args: argparse.Namespace, study: str, out: Path, scale: float) -> list[str]:
    argv = ["sweep", "--preset", study, "--out", str(out)]
    if scale != 1.0:
        argv += ["--scale", repr(scale)]
    if args.tasks is not None:
        argv += ["--tasks", str(args.tasks)]
    for flag, value in (("--data-dir", args.data_dir), ("--workers", args.workers),
                        ("--device", args.device)):
        if value is not None:
            argv += [flag, str(value)]
    return (argv + (["--compile"] if args.compile else [])
            + (["--no-progress"] if args.no_progress else []))


def reproduce_study(args: argparse.Namespace, study: str) -> int:
    """Sweep ``study`` (resuming), then write its report, export and run record under
    ``args.docs/study``; return the sweep's exit code (the report is written only after a
    sweep that finished every run)."""
    from .cli import main
    from .experiments.export import export_results
    from .experiments.presets import get_preset

    get_preset(study)  # an unknown study is an error that lists the presets
    scale = args.scale if args.scale is not None else STUDY_SCALES.get(study, 1.0)
    out, docs = Path(args.out) / study, Path(args.docs) / study
    sweep = _sweep_args(args, study, out, scale)
    print(f"reproduce {study}: plasticlab {' '.join(sweep)}", file=sys.stderr)
    t0 = time.perf_counter()
    code = main(sweep)
    elapsed = time.perf_counter() - t0
    record_path = docs / "run.json"
    command = f"plasticlab {' '.join(sweep)}"
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    if record.get("command") != command:  # sittings of another command (scale, tasks) do not add up
        record = {"sittings": []}
    record.update({"study": study, "scale": scale, "tasks": args.tasks, "command": command,
                   "machine": machine()})
    record["sittings"].append({"wall_time_s": round(elapsed, 1), "exit_code": code,
                               "ended": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    record["wall_time_s"] = round(sum(s["wall_time_s"] for s in record["sittings"]), 1)
    docs.mkdir(parents=True, exist_ok=True)
    record_path.write_text(json.dumps(record, indent=2) + "\n")
    if code != 0:
        print(f"reproduce {study}: the sweep stopped (exit {code}); run the same command again "
              "to resume it", file=sys.stderr)
        return code
    runs = export_results(out, docs)
    code = main(["report", str(docs), "--out", str(docs / "report"), "--formats", "png"])
    print(f"reproduce {study}: {runs} runs exported to {docs}; report in {docs / 'report'}",
          file=sys.stderr)
    return code


def cmd_reproduce(args: argparse.Namespace) -> int:
    for study in args.studies:
        code = reproduce_study(args, study)
        if code != 0:
            return code
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from .experiments.export import EXPORT_NAME, export_results

    out = Path(args.to) if args.to else Path(args.dir) / "export"
    runs = export_results(args.dir, out)
    print(f"{runs} finished runs → {out if out.suffix == '.gz' else out / EXPORT_NAME}")
    return 0


def register(sub) -> None:
    """Add ``reproduce`` and ``export`` to the ``plasticlab`` parser."""
    rp = sub.add_parser("reproduce", help="run the paper's studies (presets), resumable, and write "
                                          "their reports and exports for docs/reproduction/")
    rp.add_argument("studies", nargs="+", metavar="STUDY", help="preset names (`plasticlab presets`)")
    rp.add_argument("--out", default="results/reproduction",
                    help="results directories, one per study (default results/reproduction)")
    rp.add_argument("--docs", default="docs/reproduction",
                    help="where each study's report, export and run record go (default docs/reproduction)")
    rp.add_argument("--scale", type=float,
                    help="shorten every run (default: full length, except "
                         + ", ".join(f"{k} {v}" for k, v in STUDY_SCALES.items()) + ")")
    rp.add_argument("--tasks", type=int, help="run every study with this many tasks (steps per task "
                                             "unchanged): a shorter study, said so in its run record")
    rp.add_argument("--data-dir", dest="data_dir")
    rp.add_argument("--workers", type=int)
    rp.add_argument("--device")
    rp.add_argument("--compile", action="store_true",
                    help="the compiled training step where it applies (sweep --compile)")
    rp.add_argument("--no-progress", action="store_true")
    rp.set_defaults(func=cmd_reproduce)

    ex = sub.add_parser("export", help="the finished runs of a results directory as one compact "
                                       "file that `plasticlab report` reads")
    ex.add_argument("dir", help="a results directory")
    ex.add_argument("--to", help="a folder or a .json.gz file (default DIR/export/)")
    ex.set_defaults(func=cmd_export)
