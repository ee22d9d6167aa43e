"""`trtprof compare BASELINE CANDIDATE`: what got slower or less accurate, how sure, and why."""

from __future__ import annotations

import json

import click

from profiler.cli.options import Finite, db_option, db_url, open_store
from profiler.errors import GateFailed
from profiler.findings import json_safe


@click.command(name="compare")
@click.argument("baseline")
@click.argument("candidate")
@db_option
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the comparison as JSON ('-' = stdout).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), help="Write the HTML comparison report.")
@click.option("--alpha", type=Finite(0, 1, open_ends=True), default=None,
              help="Significance level of the Mann-Whitney test (default 0.01).")
@click.option("--threshold-pct", type=Finite(0, 1e6), default=None,
              help="Relative change that matters, percent (default 5).")
@click.option("--floor-us", type=Finite(0, 1e12), default=None,
              help="Absolute change that matters, microseconds (default 5).")
@click.option("--force", is_flag=True,
              help="Compare runs of different kinds, models or input shapes anyway (the output says it was forced).")
@click.option("--cdn", is_flag=True, help="Reference plotly.js from a CDN instead of embedding it.")
@click.pass_context
def command(ctx, baseline, candidate, db, json_path, report_path, alpha, threshold_pct, floor_us, force, cdn):
    """Compare CANDIDATE against BASELINE (run ids or labels). Exit 1 when anything regressed.

    A latency regression needs all of: within the run, statistically significant (Mann-Whitney p < alpha
    and a bootstrap confidence interval of the median ratio that excludes 1), larger than
    --threshold-pct and larger than --floor-us; between runs, beyond the run-to-run spread measured by
    `trtprof sweep --repeat N` on both sides, or by 3 earlier runs of the variant's fingerprint. A noisy
    variant (host-bound, on a CPU backend, or jittery) without either is `inconclusive` (exit 0). An
    accuracy regression is an output that passed its threshold in the baseline and fails it in the
    candidate. Runs of different kinds, models or input shapes are refused (exit 2) unless --force.
    """
    from profiler.cli.outputs import check_output_file, check_outputs, store_file, write_text
    from profiler.compare import compare_runs

    check_output_file(json_path, "--json")
    check_output_file(report_path, "--report")
    check_outputs([("--json", json_path), ("--report", report_path)], store=store_file(db_url(ctx, db)))

    rule = {}
    if alpha is not None:
        rule["alpha"] = alpha
    if threshold_pct is not None:
        rule["rel_threshold"] = threshold_pct / 100
    if floor_us is not None:
        rule["abs_floor_ms"] = floor_us / 1000
    store = open_store(ctx, db, must_exist=True)
    result = compare_runs(store, baseline, candidate, rule, force=force)
    # the files first: nothing the terminal summary does can lose them
    if json_path:
        text = json.dumps(json_safe(result), indent=2, default=str, allow_nan=False)
        if json_path == "-":
            click.echo(text)
        else:
            write_text(json_path, text, "--json")
    if report_path:
        from profiler.report import write_compare_report

        write_compare_report(result, report_path, cdn=cdn)
    _print(result, err=json_path == "-")  # keep stdout pure JSON for `--json -`
    if report_path:
        click.echo(f"report: {report_path}", err=json_path == "-")
    if result["verdict"] == "regression":
        what = result["latency_regressions"] + [f"{k} (accuracy)" for k in result["accuracy_regressions"]]
        raise GateFailed(f"regression in {len(what)} variant(s): {', '.join(what)}")


def _num(x, spec: str) -> str:
    """A number formatted by ``spec``, or '-' for None, NaN and anything not a number."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x != x:
        return "-"
    return format(x, spec)


def _print(result: dict, *, err: bool = False) -> None:
    def echo(line: str) -> None:
        click.echo(line, err=err)

    from profiler.report.compare import verdict_summary
    from profiler.report.verdict import compare_verdict, terminal_lines

    for line in terminal_lines(compare_verdict(result, verdict_summary(result))):
        echo(line)
    echo("")
    b, c = result["baseline"], result["candidate"]
    if result.get("forced"):
        echo(f"FORCED COMPARISON (--force): {'; '.join(result['forced'])}")
    echo(f"baseline  run {b['id']} {b.get('label') or ''}  ({b.get('created_at')})")
    echo(f"candidate run {c['id']} {c.get('label') or ''}  ({c.get('created_at')})")
    echo(f"{'variant':<36} {'verdict':<12} {'ratio':>7} {'95% CI':>15} {'p':>9}  why")
    for v in result["variants"]:
        lo, hi = _num(v.get("ci_low"), ".3f"), _num(v.get("ci_high"), ".3f")
        ci = f"{lo}-{hi}" if lo != "-" and hi != "-" else ""
        pv = v.get("p_value")
        p = "<1e-300" if pv == 0 else _num(pv, ".2g")
        verdict = str(v.get("verdict")) + ("+acc" if v.get("accuracy_verdict") == "regression" else "")
        echo(f"{str(v['key'])[:36]:<36} {verdict:<12} {_num(v.get('median_ratio'), '.3f'):>7} "
             f"{ci:>15} {p:>9}  {v.get('reason', '')}")
    for v in result["variants"]:
        if v.get("baseline_key"):
            echo(f"matched: {v['baseline_key']} (baseline) with {v['key']} (candidate), TensorRT's inference "
                 "range under another API name")
    for e in result["environment_changes"]:
        echo(f"changed: {e['field']}: {e['baseline']} -> {e['candidate']}")
    if (result.get("baseline") or {}).get("kind") == "import" and \
            all(v.get("verdict") == "missing" for v in result["variants"]):
        echo("hint: an import names each variant after its export (resnet, resnet-qat ...); to compare two exports "
             "as one model, import both with the same `--variant NAME`")
    if result.get("accuracy_unmeasured"):
        echo("accuracy: measured in neither run (trtexec exports carry none): a faster engine of another "
             "precision may be a less accurate one; `trtprof sweep` checks its outputs against FP32")
    for f in result["findings_appeared"]:
        echo(f"new finding: [{f['severity']}] {f['rule']}: {f['title']}")
    for f in result["findings_disappeared"]:
        echo(f"gone finding: [{f['severity']}] {f['rule']}: {f['title']}")
    from profiler.compare.noise import INCONCLUSIVE_CAUSES, inconclusive_cause

    by_cause: dict[str, list[str]] = {}
    for v in result["variants"]:
        if v.get("verdict") == "inconclusive":
            by_cause.setdefault(inconclusive_cause(v), []).append(str(v["key"]))
    for cause, keys in by_cause.items():
        what, todo = INCONCLUSIVE_CAUSES[cause]
        echo(f"INCONCLUSIVE: {len(keys)} variant(s) changed within one run, but {what} ({', '.join(keys)}); "
             f"this gate does not fail on them: {todo}")
    echo(f"verdict: {result['verdict']}" + (" (forced comparison)" if result.get("forced") else ""))
