"""``microbench``: measure kernels on this machine and fit a calibration.

Not built yet: ``calibrate``, ``fit`` and ``predict`` arrive with the microbench issue.
Until then ``sim`` runs on the datasheet calibrations in ``calibrations/``. The command
exists so that the console script is installed and says so plainly.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="microbench",
        description="Time kvsim's kernels on your GPU and fit calibrations/<gpu>.yaml "
                    "(not implemented yet; sim uses the datasheet calibrations meanwhile).")
    parser.add_argument("command", nargs="?", choices=["calibrate", "fit", "predict"])
    args, _ = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    print(f"error: microbench {args.command}: not implemented yet; "
          "use the datasheet calibrations in calibrations/", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
