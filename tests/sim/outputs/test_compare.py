"""`sim compare DIR DIR ...`: a table of key numbers per run and compare.html."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from sim.cli.main import main


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, tiny_sweep_scenario):
    root = tmp_path_factory.mktemp("runs")
    scenario = root / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(tiny_sweep_scenario))
    dirs = []
    for allocator in ("contiguous-static", "paged"):
        out = root / allocator
        assert main(["run", str(scenario), "--out", str(out), "--quiet", "--no-report",
                     "--set", f"kv.allocator={allocator}"]) == 0
        dirs.append(out)
    return dirs


def test_compare_prints_a_column_per_run_and_writes_html(two_runs, tmp_path, capsys):
    out = tmp_path / "compare.html"
    assert main(["compare", *map(str, two_runs), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "contiguous-static" in printed and "paged" in printed and "throughput (req/s)" in printed
    html = out.read_text()
    assert html.count("plotly.js v") == 1 and html.count("Plotly.newPlot") == 3
    waste = [json.loads((d / "summary.json").read_text())["kv"]["mean_allocated_unused_fraction"]
             for d in two_runs]
    assert f"{waste[0]:.4g}" in html and f"{waste[1]:.4g}" in html


def test_compare_lists_p95_and_p99_9_of_each_latency(two_runs, tmp_path, capsys):
    assert main(["compare", *map(str, two_runs), "--out", str(tmp_path / "c.html")]) == 0
    printed = capsys.readouterr().out
    summaries = [json.loads((d / "summary.json").read_text()) for d in two_runs]
    for label, key, q in (("TTFT p95 (s)", "ttft_s", "p95"), ("TPOT p99.9 (s)", "tpot_s", "p999"),
                          ("E2E p95 (s)", "e2e_s", "p95"), ("E2E p99.9 (s)", "e2e_s", "p999")):
        line = next(line for line in printed.splitlines() if label in line)
        assert all(f"{s[key][q]:.4g}" in line for s in summaries), (label, line)


def test_same_folder_names_are_labelled_by_path(two_runs, tmp_path, capsys):
    assert main(["compare", str(two_runs[0]), str(two_runs[0]) + "/", "--out",
                 str(tmp_path / "c.html"), "--quiet"]) == 0


def test_a_folder_without_summary_exits_2(two_runs, tmp_path, capsys):
    assert main(["compare", str(two_runs[0]), str(tmp_path), "--out", str(tmp_path / "c.html")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "summary.json" in err and err.count("\n") == 1


def _csv_edit(name: str, column: str, value: str, row: int = 2):
    """Set ``column`` of data row ``row`` (1-based) of a run's CSV to ``value``."""
    def edit(d):
        lines = (d / name).read_text().splitlines()
        i = lines[0].split(",").index(column)
        cells = lines[row].split(",")
        cells[i] = value
        lines[row] = ",".join(cells)
        (d / name).write_text("\n".join(lines) + "\n")
    return edit


def _write(name: str, data: bytes):
    return lambda d: (d / name).write_bytes(data)


def _drop_column(name: str, column: str):
    def edit(d):
        lines = (d / name).read_text().splitlines()
        i = lines[0].split(",").index(column)
        (d / name).write_text("\n".join(",".join(c for j, c in enumerate(l.split(",")) if j != i)
                                        for l in lines) + "\n")
    return edit


def _summary_edit(change):
    def edit(d):
        s = json.loads((d / "summary.json").read_text())
        change(s)
        (d / "summary.json").write_text(json.dumps(s))
    return edit


MALFORMED = {
    "requests-empty": (_write("requests.csv", b""), "requests.csv", "<file>", "empty"),
    "requests-blank": (_write("requests.csv", b"\n\n"), "requests.csv", "<file>", "empty"),
    "requests-no-tpot": (_drop_column("requests.csv", "tpot_s"), "requests.csv", "tpot_s", "missing column"),
    "requests-text-ttft": (_csv_edit("requests.csv", "ttft_s", "fast"), "requests.csv", "ttft_s",
                           "line 3: 'fast' is not a finite number"),
    "requests-nan-e2e": (_csv_edit("requests.csv", "e2e_s", "nan"), "requests.csv", "e2e_s", "not a finite number"),
    "requests-nul": (_write("requests.csv", b"ttft_s,tpot_s,e2e_s\n1,\x00,2\n"), "requests.csv", "tpot_s",
                     "line 2: '\\x00' is not a finite number"),
    "requests-latin1": (_write("requests.csv", "ttft_s,tpot_s,e2e_s\n1,2,3 \u00e9\n".encode("latin-1")),
                        "requests.csv", "<encoding>", "not UTF-8 text"),
    "steps-empty": (_write("steps.csv", b""), "steps.csv", "<file>", "empty"),
    "steps-no-kv": (_drop_column("steps.csv", "kv_allocated_slots"), "steps.csv", "kv_allocated_slots",
                    "missing column"),
    "steps-text": (_csv_edit("steps.csv", "kv_token_slots", "12abc"), "steps.csv", "kv_token_slots",
                   "line 3: '12abc' is not a finite number"),
    "steps-empty-cell": (_csv_edit("steps.csv", "time_s", "", row=1), "steps.csv", "time_s", "line 2: empty cell"),
    "steps-utf16": (lambda d: (d / "steps.csv").write_text((d / "steps.csv").read_text(), encoding="utf-16"),
                    "steps.csv", "<encoding>", "not UTF-8 text"),
    "summary-empty": (_write("summary.json", b""), "summary.json", "<file>", "empty"),
    "summary-truncated": (_write("summary.json", b'{"kv": {"pool_tokens": 1'), "summary.json", "<json>",
                          "malformed JSON"),
    "summary-list": (_write("summary.json", b"[1, 2]"), "summary.json", "<root>", "expected a JSON object"),
    "summary-latin1": (_write("summary.json", '{"model": "caf\u00e9"}'.encode("latin-1")), "summary.json",
                       "<encoding>", "not UTF-8 text"),
    "summary-no-pool": (_summary_edit(lambda s: s["kv"].pop("pool_tokens")), "summary.json", "kv.pool_tokens",
                        "expected a positive number"),
    "summary-text-metric": (_summary_edit(lambda s: s["throughput"].update(requests_per_s="fast")),
                            "summary.json", "throughput.requests_per_s", 'expected a number or null, got "fast"'),
    "summary-kv-list": (_summary_edit(lambda s: s.update(kv=[1])), "summary.json", "kv.pool_tokens",
                        "expected a positive number"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_run_file_is_one_error_line_and_exit_2(two_runs, tmp_path, capsys, case):
    edit, name, key, what = MALFORMED[case]
    bad = tmp_path / "bad"
    shutil.copytree(two_runs[1], bad)
    edit(bad)
    capsys.readouterr()
    assert main(["compare", str(two_runs[0]), str(bad), "--out", str(tmp_path / "c.html"), "--quiet"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert captured.err.startswith(f"error: {bad / name}: {key}") and what in captured.err
    assert not (tmp_path / "c.html").exists()


def test_a_run_keeps_one_colour_in_every_panel(two_runs, tmp_path):
    from sim.outputs.compare import _bars, _cdfs, _labels, _memory, load_run

    labels = _labels([str(d) for d in two_runs])
    runs = [load_run(str(d), label) for d, label in zip(two_runs, labels)]
    seen: dict[str, set] = {label: set() for label in labels}
    for fig in (_bars(runs), _cdfs(runs), _memory(runs)):
        for trace in fig.data:
            color = trace.marker.color if trace.type == "bar" else trace.line.color
            assert color is not None, (fig.layout.title.text, trace.name)
            seen[trace.legendgroup].add(color)
    assert all(len(colors) == 1 for colors in seen.values()), seen
    assert len({c for colors in seen.values() for c in colors}) == len(runs)  # and runs differ


def test_a_cluster_and_one_engine_compare_per_gpu(two_runs, tmp_path, tiny_sweep_scenario, capsys):
    """A cluster counts its replicas' GPUs (tp x pp each) and the table divides its output
    tokens by them, so 2 replicas are not read as one engine twice as fast."""
    from sim.outputs.compare import load_run

    scenario = tmp_path / "fleet.yaml"
    scenario.write_text(yaml.safe_dump({**tiny_sweep_scenario, "cluster": {"num_replicas": 2}}))
    fleet = tmp_path / "fleet"
    assert main(["run", str(scenario), "--out", str(fleet), "--quiet", "--no-report"]) == 0
    one, two = load_run(str(two_runs[1]), "one"), load_run(str(fleet), "two")
    assert one.flat["engine.gpus"] == 1 and two.flat["engine.gpus"] == 2
    for run in (one, two):
        per_gpu = run.flat["throughput.output_tokens_per_s_per_gpu"]
        assert per_gpu == pytest.approx(run.flat["throughput.output_tokens_per_s"] / run.flat["engine.gpus"])
    assert main(["compare", str(two_runs[1]), str(fleet), "--out", str(tmp_path / "c.html")]) == 0
    assert "output tokens/s per GPU" in capsys.readouterr().out
