"""``sim serve``: the scenario's simulated engine behind vLLM's OpenAI-compatible HTTP API
(sim/serve/). Needs the ``serve`` extra (aiohttp)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from sim.errors import ConfigError

MAX_TIME_SCALE = 1000.0


def add_serve_parser(sub) -> None:
    p = sub.add_parser("serve", help="serve the scenario's simulated engine on the OpenAI API (as vLLM would time it)")
    p.add_argument("scenario", help="scenario YAML file, or a shipped scenario by name (its workload is not used)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: a free one, printed)")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="simulated seconds per wall second (default 1: real time; 10: ten times faster)")
    p.add_argument("--replicas", type=int, default=None,
                   help="engines behind kvsim's router on this port (default: the scenario's cluster.num_replicas)")
    p.add_argument("--replica-ports", nargs="?", const="", default=None, metavar="PORT,PORT,...",
                   help="each replica on a port of its own, for an external router: the flag alone gives "
                        "--port, --port + 1, ...; or list one port per replica (default: all behind kvsim's "
                        "router on --port)")
    p.add_argument("--tokenizer", default=None, metavar="PATH",
                   help="count prompt tokens with this tokenizer: a tokenizer.json or a folder holding one "
                        "(the tokenizers package), or a model id or folder for transformers (default: "
                        "an estimate, 4 characters a token)")
    p.add_argument("--max-waiting", type=int, default=None,
                   help="queue limit: a request that finds this many waiting gets a 503 (default: none)")
    p.add_argument("--served-model-name", default=None, help="model name clients use (default: the scenario's model)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a scenario key (repeatable)")
    p.add_argument("--out", default=None,
                   help="on shutdown, write the run here as sim run does (summary.json, CSVs, report) plus serve.json")
    p.add_argument("--no-report", action="store_true", help="with --out: skip report.html")
    p.add_argument("--force", action="store_true", help="with --out: replace an earlier run there")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")


def _check(args) -> None:
    if not (math.isfinite(args.time_scale) and 0 < args.time_scale <= MAX_TIME_SCALE):
        raise ConfigError("--time-scale", str(args.time_scale), f"must be > 0 and <= {MAX_TIME_SCALE:g}")
    if not 0 <= args.port <= 65535:
        raise ConfigError("--port", str(args.port), "must be 0..65535")
    if args.replicas is not None and not 1 <= args.replicas <= 256:
        raise ConfigError("--replicas", str(args.replicas), "must be 1..256")
    if args.max_waiting is not None and args.max_waiting < 1:
        raise ConfigError("--max-waiting", str(args.max_waiting), "must be >= 1 (a request that finds that many "
                                                                  "waiting gets a 503)")


def run_serve(args) -> int:
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        print("error: sim serve needs aiohttp: pip install 'kvsim[serve]'", file=sys.stderr)
        return 2
    import asyncio

    from sim.config.scenario import load_scenario
    from sim.serve.results import accounting, write_served
    from sim.serve.server import replica_port_list, serve

    _check(args)
    overrides = list(args.overrides)
    if args.replicas is not None:
        overrides.append(f"cluster.num_replicas={args.replicas}")
    sc = load_scenario(args.scenario, overrides)
    replica_ports = replica_port_list(args.replica_ports, args.port, sc.cluster.num_replicas)
    tokenizer = None
    if args.tokenizer is not None:
        from sim.serve.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(args.tokenizer)
    stale = ()
    if args.out:
        from sim.outputs.files import prepare_out_dir, run_files

        stale = prepare_out_dir(Path(args.out), run_files(report=not args.no_report) + ["serve.json", "arrivals.csv"],
                                force=args.force)

    def ready(ports: list[int]) -> None:
        if args.quiet:
            return
        n = sc.cluster.num_replicas
        where = ", ".join(f"http://{args.host}:{p}/v1" for p in ports)
        what = f"{n} replica(s), a port each" if replica_ports is not None else f"{n} engine(s)"
        print(f"sim serve: {sc.name} ({sc.model}, {what}) on {where} at time scale {args.time_scale:g}"
              f"{f'; prompts counted by {tokenizer.name}' if tokenizer else ''}; Ctrl-C drains and stops",
              file=sys.stderr, flush=True)

    served = asyncio.run(serve(sc, host=args.host, port=args.port, time_scale=args.time_scale,
                               max_waiting=args.max_waiting, model_name=args.served_model_name, ready=ready,
                               replica_ports=replica_ports, tokenizer=tokenizer))
    total = accounting(served)["total"]
    if args.out:
        write_served(Path(args.out), served, stale, report=not args.no_report)
    if not args.quiet:
        print("sim serve: drained: {arrived} arrived = {completed} completed + {rejected} rejected + "
              "{aborted} aborted + {in_flight} in flight".format(**total), file=sys.stderr, flush=True)
    return 0
