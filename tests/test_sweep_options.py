"""profiler.sweep.options: ``trtprof sweep``'s options into a SweepConfig, usable without the CLI, with the
CLI's own defaults."""

from __future__ import annotations

import inspect

import pytest

from profiler.cli.sweep import command
from profiler.errors import UsageError
from profiler.sweep.options import CONFIG_OPTIONS, config_from_options


def test_the_library_defaults_are_the_command_s():
    lib = inspect.signature(config_from_options).parameters
    given = command.make_context("sweep", [], resilient_parsing=True).params  # what `trtprof sweep` passes
    assert set(CONFIG_OPTIONS) <= set(given), set(CONFIG_OPTIONS) - set(given)
    for name in CONFIG_OPTIONS:
        assert lib[name].default == given[name], name


def test_options_spelt_as_on_the_command_line_make_the_config(tmp_path):
    c = config_from_options(model="m.onnx", precision="fp32, int8", workspace="64M,default", streams="1,2",
                            cuda_graph="off,on", shapes=("x:1x3x8x8",), thresholds=("int8.rel_l2_max=0.1",
                                                                                     "jitter.cov_pct=3"),
                            output_kinds=("probs:classes",), no_layers=True, out_dir=str(tmp_path / "o"))
    assert (c.precisions, c.workspaces, c.streams, c.cuda_graph) == (["fp32", "int8"], [64 << 20, None], [1, 2],
                                                                     [False, True])
    assert c.shapes == {"x": [1, 3, 8, 8]} and c.layers is False and c.out_dir == str(tmp_path / "o")
    assert c.thresholds == {"int8": {"rel_l2_max": 0.1}} and c.rule_thresholds == {"jitter": {"cov_pct": 3.0}}
    assert c.output_kinds == {"probs": "classes"}
    for bad, option in ((dict(streams="0"), "--streams"), (dict(cuda_graph="maybe"), "--cuda-graph"),
                        (dict(precision=" , "), "--precision"), (dict(workspace="lots"), "--workspace")):
        with pytest.raises(UsageError, match=option):
            config_from_options(**bad)
