"""`trtprof compare BASELINE CANDIDATE`: what got slower or less accurate, how sure, and why."""

from __future__ import annotations

import json

import click

from profiler.cli.options import Finite, db_option, db_url, open_store
from profiler.errors import GateFailed, UsageError
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
    """Compare CANDIDATE against BASELINE (run ids or labels, or JSON files of `trtprof analyze`). Exit 1 when
    anything regressed.

    Two captures (stored analyses or analysis JSON files, which need no store) are compared by their
    inference: the units matched by name or role, judged on time per inference (host time where one side's
    GPU time is unmeasured), per-kernel GPU time where neither has a unit; the output says how many ranges
    were compared and how many could not be matched.

    A latency regression needs all of: within the run, statistically significant (Mann-Whitney p < alpha
    and a bootstrap confidence interval of the median ratio that excludes 1), larger than
    --threshold-pct and larger than --floor-us; between runs, beyond the run-to-run spread measured by
    `trtprof sweep --repeat N` on both sides, or by 3 earlier runs of the variant's fingerprint. A noisy
    variant (host-bound, on a CPU backend, or jittery) without either is `inconclusive` (exit 0). An
    accuracy regression is an output that passed its threshold in the baseline and fails it in the
    candidate. Runs of different kinds, models or input shapes are refused (exit 2) unless --force.
    """
    from profiler.cli.outputs import check_output_file, check_outputs, store_file, write_text

    check_output_file(json_path, "--json")
    check_output_file(report_path, "--report")
    files = [ref if _is_json_file(ref) else None for ref in (baseline, candidate)]
    check_outputs([("--json", json_path), ("--report", report_path)],
                  [("the baseline", files[0]), ("the candidate", files[1])],
                  store=None if all(files) else store_file(db_url(ctx, db)))

    rule = {}
    if alpha is not None:
        rule["alpha"] = alpha
    if threshold_pct is not None:
        rule["rel_threshold"] = threshold_pct / 100
    if floor_us is not None:
        rule["abs_floor_ms"] = floor_us / 1000
    result = _compare(ctx, db, baseline, candidate, rule, force)
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


def _is_json_file(ref: str) -> bool:
    """A ref naming a .json file (an analysis document), not a run id or label; one that is missing, or is a
    directory or a FIFO, is bad input (exit 3)."""
    from profiler.files import check_input_file

    if not ref.lower().endswith(".json"):
        return False
    check_input_file(ref, "analysis JSON", "a JSON file written by trtprof analyze")
    return True


def _compare(ctx, db, baseline: str, candidate: str, rule: dict, force: bool) -> dict:
    """Two analysis JSON files (no store needed), a file against a stored analysis, or two stored runs."""
    from profiler.compare import compare_runs
    from profiler.compare.captures import compare_captures, load_document, side_from_document, side_from_run

    files = [_is_json_file(x) for x in (baseline, candidate)]
    if not any(files):
        return compare_runs(open_store(ctx, db, must_exist=True), baseline, candidate, rule, force=force)
    store = None if all(files) else open_store(ctx, db, must_exist=True)
    sides = []
    for ref, is_file in zip((baseline, candidate), files):
        if is_file:
            sides.append(side_from_document(load_document(ref), ref))
            continue
        run = store.run_dict(ref)
        if run.get("kind") != "analyze":
            raise UsageError(f"{ref!r} is {run.get('kind')} run {run.get('id')}; an analysis JSON file compares "
                             "only with another analysis (a file, or a run stored by `trtprof analyze`)")
        sides.append(side_from_run(store, run))
    return compare_captures(sides[0], sides[1], rule)


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
    for name, side in (("baseline ", b), ("candidate", c)):
        echo(f"{name} run {side['id']} {side.get('label') or ''}  ({side.get('created_at')})" if side.get("id")
             is not None else f"{name} file {side.get('source')}")
    if result.get("captures"):
        echo(f"compared: {result['captures']['summary']}")
    echo(f"{'variant':<36} {'verdict':<12} {'ratio':>7} {'95% CI':>15} {'p':>9}  why")
    for v in result["variants"]:
        lo, hi = _num(v.get("ci_low"), ".3f"), _num(v.get("ci_high"), ".3f")
        ci = f"{lo}-{hi}" if lo != "-" and hi != "-" else ""
        pv = v.get("p_value")
        p = "<1e-300" if pv == 0 else _num(pv, ".2g")
        verdict = str(v.get("verdict")) + ("+acc" if v.get("accuracy_verdict") == "regression" else "")
        echo(f"{str(v['key'])[:36]:<36} {verdict:<12} {_num(v.get('median_ratio'), '.3f'):>7} "
             f"{ci:>15} {p:>9}  {v.get('reason', '')}")
        d = v.get("detectable_change") or {}
        if d.get("text") and v.get("role") != "range":
            said = d.get("what") if v.get("verdict") in ("regression", "improvement") else d["text"]
            echo(f"{'':<36} smallest detectable change: {said or d['text']}")
        from profiler.report.compare import disturbance_text

        if disturbance_text(v):
            echo(f"{'':<36} {disturbance_text(v)}")
    for v in result["variants"]:
        if v.get("baseline_key") and v.get("matched_by"):
            echo(f"matched: {v['baseline_key']} (baseline) with {v['key']} (candidate), {v['matched_by']}: each "
                 "is its capture's inference")
        elif v.get("baseline_key"):
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
        if v.get("verdict") == "inconclusive" and v["key"] in result["inconclusive"]:
            by_cause.setdefault(inconclusive_cause(v), []).append(str(v["key"]))
    for cause, keys in by_cause.items():
        what, todo = INCONCLUSIVE_CAUSES[cause]
        seen = "showed no change within one run" if cause == "underpowered" and not any(
            v.get("verdict_within_run") in ("regression", "improvement") for v in result["variants"]
            if v["key"] in keys) else "changed within one run"
        echo(f"INCONCLUSIVE: {len(keys)} variant(s) {seen}, but {what} ({', '.join(keys)}); "
             f"this gate does not fail on them: {todo}")
    echo(f"verdict: {result['verdict']}" + (" (forced comparison)" if result.get("forced") else ""))
