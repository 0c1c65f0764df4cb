"""``microbench``: measure kernels on this machine and fit a calibration. Thin: parse, run, write.

    microbench calibrate --gpu 0 [--model NAME ...] [--quick] [--out calibrations-measured/NAME.yaml]
    microbench calibrate --device cpu [--quick]
    microbench fit MEASUREMENTS.jsonl -o CAL.yaml [--base NAME_OR_YAML] [--name NAME]
    microbench predict CAL.yaml --kernel gemm --m 256 --n 4096 --k 4096 [--dtype bf16]
    microbench import aiconfigurator --system h100_sxm [--backend vllm] [--version V] [--out CAL.yaml]

Bad input prints one line ``error: <file>: <key>: <message>`` and exits 2, argparse's errors
too, and calibrate checks every flag, torch, the device and ``--out`` before timing anything.
"""

from __future__ import annotations

import argparse
import sys

from microbench.checks import MEASURED_DIR, check_calibrate_flags, check_fitted, check_output, warn_absurd_fits
from sim.errors import ConfigError, OneLineParser, cli_exit_code, unlink_symlink


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="microbench", allow_abbrev=False,
                           description=f"Time kvsim's kernels and fit {MEASURED_DIR}/<gpu>.yaml.")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("calibrate", help="measure the kernels on a device, keep the JSONL, fit a calibration")
    where = c.add_mutually_exclusive_group(required=True)
    where.add_argument("--gpu", type=int, metavar="INDEX", help="CUDA device index")
    where.add_argument("--device", help="a torch device: cpu, cuda, cuda:1")
    c.add_argument("--model", action="append", default=None, metavar="NAME",
                   help="model whose shapes to measure (repeatable; default llama-3-8b on CUDA, qwen2.5-1.5b on CPU)")
    c.add_argument("--quick", action="store_true", help="a small sweep (CI; about a minute on a GPU)")
    c.add_argument("--out", help=f"calibration YAML to write (default {MEASURED_DIR}/<device>.yaml); the raw "
                   "timings (JSONL) go next to it, written as they are measured")
    c.add_argument("--threads", type=int, help="CPU: torch threads (default: torch's default; 1 is steadier on a shared machine)")
    c.add_argument("--no-progress", action="store_true", help="no progress bar")
    f = sub.add_parser("fit", help="fit a calibration from JSONL measurements")
    f.add_argument("measurements", help="JSONL file, one timing per line (schema in docs/reference/calibrations.md)")
    f.add_argument("-o", "--out", required=True, help="calibration YAML to write")
    f.add_argument("--base", help="calibration (name or YAML) giving the device numbers the JSONL lacks")
    f.add_argument("--name", help="calibration name (default: the device record's, or the output's stem)")
    f.add_argument("--folds", type=int, default=5, help="cross-validation folds (by shape; default 5)")
    f.add_argument("--no-grid", action="store_true", help="keep no measured grid (analytic predictions only)")
    i = sub.add_parser("import", help="fit a calibration from published kernel timings (no GPU needed)")
    isub = i.add_subparsers(dest="source", required=True)
    a = isub.add_parser("aiconfigurator", help="NVIDIA's silicon database in aiconfigurator-core (the [import] extra)",
                        description="Read aiconfigurator-core's measured GEMM and attention tables for one GPU and "
                        "backend, convert them to kvsim measurements and fit a calibration (kernel_timing: device; "
                        "what the tables lack comes from the GPU's datasheet calibration). microbench/aiconfigurator.py")
    a.add_argument("--system", required=True, help="aiconfigurator system: h100_sxm, h200_sxm, b200_sxm, a100_sxm, l40s")
    a.add_argument("--backend", default="vllm", help="whose kernels: vllm (default), sglang, trtllm")
    a.add_argument("--version", help="the framework version of the tables (default: the newest holding all three)")
    a.add_argument("--out", help=f"calibration YAML to write (default {MEASURED_DIR}/<gpu>@<backend>.yaml)")
    a.add_argument("--comm-curves", action="store_true",
                   help="also take the package's measured NCCL and engine all-reduce curves into the interconnect "
                        "(off by default: on held-out published TP cases they did worse; docs/MEASURED_KERNELS.md)")
    a.add_argument("--keep-jsonl", action="store_true",
                   help="also write the converted measurement records next to --out (<name>.jsonl, for microbench fit)")
    a.add_argument("--folds", type=int, default=5, help="cross-validation folds (by shape; default 5)")
    p = sub.add_parser("predict", allow_abbrev=False, help="seconds of one kernel launch under a calibration",
                       epilog="shape fields: see sim/calib/kernel_models.py, e.g. gemm: --m --n --k [--dtype]")
    p.add_argument("calibration", help="calibration name or YAML")
    p.add_argument("--kernel", required=True)
    p.add_argument("--dtype", help="dtype of the kernels that take one (default bf16)")
    return parser


def _parse_shape(rest: list[str]) -> dict:
    """``--field value`` pairs into a shape dict (ints, floats, booleans, strings)."""
    if len(rest) % 2 or not all(a.startswith("--") for a in rest[::2]):
        raise ConfigError("<cli>", "shape", f"expected --field value pairs, got {' '.join(rest)!r}")
    shape = {}
    for key, text in zip(rest[::2], rest[1::2]):
        value: object = text
        if text.lower() in ("true", "false"):
            value = text.lower() == "true"
        else:
            for kind in (int, float):
                try:
                    value = kind(text)
                    break
                except ValueError:
                    pass
        shape[key[2:].replace("-", "_")] = value
    return shape


def _predict(args, rest: list[str]) -> int:
    from sim.calib.calibration import load_calibration  # noqa: PLC0415
    from sim.calib.kernel_models import KERNELS  # noqa: PLC0415

    from microbench.records import check_field  # noqa: PLC0415

    cal = load_calibration(args.calibration, key="calibration")
    spec = KERNELS.get(args.kernel)
    if spec is None:
        raise ConfigError("<cli>", "--kernel", f"unknown kernel {args.kernel!r}; allowed: {', '.join(KERNELS)}")
    shape = _parse_shape(rest)
    if args.dtype is not None or "dtype" in spec.fields:
        shape["dtype"] = args.dtype or "bf16"
    missing = [f for f in spec.fields if f not in shape]
    unknown = [f for f in shape if f not in spec.fields]
    if missing or unknown:
        raise ConfigError("<cli>", "shape", f"{args.kernel} takes --{' --'.join(spec.fields)}"
                          f"{'; missing ' + ', '.join(missing) if missing else ''}"
                          f"{'; unknown ' + ', '.join(unknown) if unknown else ''}")
    for name in spec.fields:
        check_field(name, shape[name], file="<cli>", key=f"--{name.replace('_', '-')}")
    seconds = cal.predict(args.kernel, **shape)
    how = "fitted" if args.kernel in cal.kernels else f"{cal.source} roofline"
    print(f"{seconds:.6g} s  ({seconds * 1e6:,.1f} us; {args.kernel} on {cal.name}, {how})")
    return 0


def _fit(args) -> int:
    import yaml  # noqa: PLC0415

    from microbench.compose import describe_composition  # noqa: PLC0415
    from microbench.fit import describe, fit  # noqa: PLC0415
    from microbench.gemm_tiles import measured_gemm_tiles  # noqa: PLC0415
    from microbench.peaks import describe_precision  # noqa: PLC0415
    from microbench.records import read_jsonl  # noqa: PLC0415
    from sim.calib.calibration import calibration_to_dict, load_calibration  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    if args.folds < 2:
        raise ConfigError("<cli>", "--folds", f"expected at least 2 cross-validation folds, got {args.folds}")
    out = Path(args.out)
    check_output(out, "--out")
    records, device = read_jsonl(args.measurements)
    base = load_calibration(args.base, key="--base") if args.base else None
    if device is not None:
        device.setdefault("provenance", {})["measurements"] = Path(args.measurements).name
    try:
        cal = fit(records, device=device, base=base, name=args.name or out.stem, folds=args.folds,
                  grid=not args.no_grid, gemm_tiles=measured_gemm_tiles(device))
    except ConfigError as exc:  # the fit names "<measurements>": name the file
        raise ConfigError(args.measurements, exc.key, exc.message) from None
    check_fitted(cal, measurements=args.measurements)
    for f in cal.kernels.values():
        print("  " + describe(f))
    from microbench.interconnect_step import refit_beside, with_interconnect  # noqa: PLC0415

    cal = with_interconnect(cal, *refit_beside(Path(args.measurements)))  # calibrate's <name>.interconnect.jsonl
    if cal.composition is not None:
        print("  " + describe_composition(cal.composition))
    if (line := describe_precision(cal.precision)) is not None:
        print("  " + line)
    try:
        unlink_symlink(out)
        out.write_text(f"# kvsim calibration, schema 2, fitted by microbench fit from {Path(args.measurements).name}.\n"
                       + yaml.safe_dump(calibration_to_dict(cal), sort_keys=False, width=120))
    except OSError as exc:
        raise ConfigError("<cli>", "--out", f"cannot write {out}: {exc.strerror or exc}") from None
    warn_absurd_fits(cal, out)
    print(f"wrote {out}")
    return 0


def _import(args) -> int:
    import yaml  # noqa: PLC0415

    from microbench.aiconfigurator import BACKENDS, SYSTEMS, build_calibration, calibration_name, import_records  # noqa: PLC0415
    from microbench.fit import describe  # noqa: PLC0415
    from microbench.peaks import describe_precision  # noqa: PLC0415
    from microbench.records import write_jsonl  # noqa: PLC0415
    from sim.calib.calibration import calibration_to_dict, load_calibration  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    if args.system not in SYSTEMS:
        raise ConfigError("<cli>", "--system", f"got {args.system!r}; allowed: {', '.join(SYSTEMS)}")
    if args.backend not in BACKENDS:
        raise ConfigError("<cli>", "--backend", f"got {args.backend!r}; allowed: {', '.join(BACKENDS)}")
    if args.folds < 2:
        raise ConfigError("<cli>", "--folds", f"expected at least 2 cross-validation folds, got {args.folds}")
    name = calibration_name(args.system, args.backend)
    out = Path(args.out or f"{MEASURED_DIR}/{name}.yaml")
    check_output(out, "--out", also=(".jsonl",) if args.keep_jsonl else ())
    records, device, converted = import_records(args.system, args.backend, args.version)
    for table, c in converted.items():
        left = ", ".join(f"{why} {n:,}" for why, n in c.skipped.most_common())
        print(f"  {table}: {c.rows:,} rows -> {len(c.records):,} records" + (f" (left out: {left})" if left else ""))
    base = load_calibration(SYSTEMS[args.system].datasheet, key="--system")
    cal = build_calibration(records, device, base, folds=args.folds)
    from microbench.aiconfigurator_comm import attach_comm  # noqa: PLC0415

    if args.comm_curves:  # the measured all-reduce curves (microbench/aiconfigurator_comm.py)
        cal = attach_comm(cal, args.system, args.backend, args.version)
    check_fitted(cal, measurements=str(out))
    for f in cal.kernels.values():
        print("  " + describe(f))
    if (line := describe_precision(cal.precision)) is not None:
        print("  " + line)
    print(f"  from the datasheet {base.name}: {cal.provenance['datasheet']}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        unlink_symlink(out)
        out.write_text(f"# kvsim calibration, schema 2: {cal.gpu_name} kernels under {args.backend}, imported by "
                       f"microbench import aiconfigurator (provenance below).\n"
                       + yaml.safe_dump(calibration_to_dict(cal), sort_keys=False, width=120))
        if args.keep_jsonl:
            write_jsonl(out.with_suffix(".jsonl"), records, device | {"memory_bytes": base.memory_bytes})
    except OSError as exc:
        raise ConfigError("<cli>", "--out", f"cannot write {out}: {exc.strerror or exc}") from None
    warn_absurd_fits(cal, out)
    print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli_exit_code(lambda: _dispatch(argv))


def _dispatch(argv: list[str]) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and args.command != "predict":
        raise ConfigError("<cli>", rest[0], f"unrecognized argument(s) {' '.join(rest)!r}"[:300]
                          + f" (see microbench {args.command} --help)")
    if args.command == "predict":
        return _predict(args, rest)
    if args.command == "fit":
        return _fit(args)
    if args.command == "import":
        return _import(args)
    check_calibrate_flags(args)
    from microbench.calibrate import calibrate  # noqa: PLC0415

    device = f"cuda:{args.gpu}" if args.gpu is not None else args.device
    calibrate(argv, device_arg=device, device_flag="--gpu" if args.gpu is not None else "--device",
              models=args.model, quick=args.quick, out=args.out, threads=args.threads,
              show_progress=not args.no_progress and sys.stderr.isatty())
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
