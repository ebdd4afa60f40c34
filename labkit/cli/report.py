"""`labkit report RUN_DIR`: write one offline HTML report (summary, config, charts) of a run."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `report` sub-command."""
    p = sub.add_parser("report", help="write report.html of a run directory (train) or output directory (simulate)",
                       description="Write RUN_DIR/report.html: the run's summary, config and the lab's charts as "
                                   "static pictures, one self-contained file that opens offline.")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a `labkit train` run directory or `labkit simulate` output")
    p.set_defaults(handler=_run, parser=p)


def _run(args: argparse.Namespace) -> int:
    from labkit.lab.report import write_report  # altair and vl-convert: 2 s to import, only here

    try:
        path = write_report(args.run_dir)
    except (OSError, ValueError) as exc:
        args.parser.error(str(exc).splitlines()[0])
    print(f"report: {path}")
    return 0
