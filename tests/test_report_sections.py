"""Report pages are lists of section functions: each one is listed, each builds its own section."""

from __future__ import annotations

import inspect

import pytest

from profiler.report import analysis, compare, concurrency, generation, inference, layers, sweep
from profiler.report.common import Section, add_sections, chart, figure, new_page
from tests.report_examples import analysis_example, compare_example, layers_example, sweep_example

PAGES = [(analysis, analysis.build_analysis_page, analysis_example, [inference, generation, concurrency]),
         (sweep, sweep.build_sweep_page, sweep_example, []),
         (layers, layers.build_layers_page, layers_example, []),
         (compare, compare.build_compare_page, compare_example, [])]


def _section_functions(module) -> set:
    """Functions of ``module`` shaped like a section: one parameter (the document), returning a Section."""
    out = set()
    for _, fn in inspect.getmembers(module, inspect.isfunction):
        if fn.__module__ != module.__name__:
            continue
        sig = inspect.signature(fn)
        if len(sig.parameters) == 1 and "Section" in str(sig.return_annotation):
            out.add(fn)
    return out


@pytest.mark.parametrize("module,build,example,helpers", PAGES, ids=lambda p: getattr(p, "__name__", ""))
def test_every_section_function_is_in_its_page_s_list(module, build, example, helpers):
    found = _section_functions(module).union(*(_section_functions(h) for h in helpers))
    listed = set(module.SECTIONS)
    assert found, f"{module.__name__} has no section functions"
    assert found <= listed, f"section functions missing from {module.__name__}.SECTIONS: " + \
        ", ".join(sorted(f.__name__ for f in found - listed))
    assert len(module.SECTIONS) == len(listed), "a section listed twice"


@pytest.mark.parametrize("module,build,example,helpers", PAGES, ids=lambda p: getattr(p, "__name__", ""))
def test_the_page_is_its_sections_in_list_order(module, build, example, helpers):
    doc = example()
    built = [s for s in (fn(doc) for fn in module.SECTIONS) if s is not None]
    assert all(isinstance(s, Section) for s in built)
    page = build(doc)
    assert [s["id"] for s in page["sections"]] == [s.id for s in built]
    assert len({s.id for s in built}) == len(built)  # anchors are unique
    # every figure belongs to the one section that places it
    placed = [b["id"] for s in page["sections"] for b in s["blocks"] if b.get("type") == "chart"]
    assert placed == list(page["figures"])


@pytest.mark.parametrize("module,build,example,helpers", PAGES, ids=lambda p: getattr(p, "__name__", ""))
def test_each_section_copes_with_an_empty_document(module, build, example, helpers):
    for fn in module.SECTIONS:
        sec = fn({})
        assert sec is None or (isinstance(sec, Section) and sec.blocks), fn.__name__


def test_figures_of_two_sections_with_one_id_both_stay_placed():
    def one(doc):
        sec = Section("one", "One")
        return sec.add(chart(sec, "x", figure([{"type": "bar", "y": [1]}])))

    def two(doc):
        sec = Section("two", "Two")
        return sec.add(chart(sec, "x", figure([{"type": "bar", "y": [2]}])), chart(sec, "x", figure([])))

    page = new_page("analysis", "t")
    add_sections(page, {}, [one, lambda doc: None, two])
    assert [s["id"] for s in page["sections"]] == ["one", "two"]
    assert list(page["figures"]) == ["fig-x", "fig-x-2", "fig-x-2-2"]
    assert [b["id"] for b in page["sections"][1]["blocks"]] == ["fig-x-2", "fig-x-2-2"]
    assert page["figures"]["fig-x"]["data"][0]["y"] == [1]
    assert page["figures"]["fig-x-2"]["data"][0]["y"] == [2]
