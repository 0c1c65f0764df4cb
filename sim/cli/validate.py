"""``sim validate``'s arguments. Running it needs the ``validation`` package (and torch), which
is imported only when the command runs (sim.cli.main)."""

from __future__ import annotations


def add_validate_parser(sub) -> None:
    p = sub.add_parser("validate", help="run the scenario on a real model and measure the simulator's error")
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default cpu)")
    p.add_argument("--calibration", default=None,
                   help="calibration name or YAML for the simulator (default: the scenario's gpu)")
    p.add_argument("--out", default=None, help="output folder (default runs/<name>-validate)")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier run in --out (its files this run does not write are removed)")
    p.add_argument("--mode", choices=("both", "lockstep", "open-loop"), default="both")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE")
    p.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up run")
    p.add_argument("--no-drift-check", action="store_true",
                   help="skip re-timing a few of the calibration's whole steps before validating")
