"""The document types: every command's JSON says its kind, and the report dispatches on it."""

from __future__ import annotations

import typing

import pytest

from profiler import documents
from profiler.documents import KINDS, document_kind
from profiler.errors import InputError
from profiler.report import PAGE_OF_KIND, report_kind, write_report
from tests.report_examples import analysis_example, compare_example, layers_example, sweep_example

TYPES = {"analyze": documents.AnalysisDocument, "sweep": documents.SweepDocument,
         "import": documents.ImportDocument, "compare": documents.ComparisonDocument}


def test_every_kind_has_a_type_that_names_it_and_a_report_page():
    assert set(TYPES) == set(KINDS) == set(PAGE_OF_KIND)
    for kind, cls in TYPES.items():
        assert typing.get_args(typing.get_type_hints(cls)["kind"]) == (kind,)
    assert set(typing.get_args(documents.Document)) == set(TYPES.values())


@pytest.mark.parametrize("kind", KINDS)
def test_an_explicit_kind_decides_even_against_the_shape(kind):
    misleading = {"kind": kind, "ranges": [], "baseline": {}, "candidate": {}, "variants": []}
    assert document_kind(misleading) == kind


def test_an_unknown_kind_is_bad_input_naming_the_known_ones():
    with pytest.raises(InputError, match=r"unknown document kind 'analysis': .* is 'analyze', 'sweep', 'import' or 'compare'$"):
        document_kind({"kind": "analysis", "ranges": []})
    with pytest.raises(InputError, match="unknown document kind"):
        report_kind({"kind": 3})
    with pytest.raises(InputError, match="expected a JSON object"):
        document_kind([{"kind": "sweep"}])
    with pytest.raises(InputError, match="cannot tell"):
        document_kind({"something": 1})


def test_files_written_before_the_kind_field_are_read_by_their_shape():
    def without_kind(d: dict) -> dict:
        return {k: v for k, v in d.items() if k != "kind"}

    assert document_kind(without_kind(sweep_example())) == "sweep"  # its run says sweep
    assert document_kind({"run": {"kind": "import"}, "variants": [{"streams": 1}]}) == "import"
    assert document_kind({"variants": [], "layers": [{"name": "x"}]}) == "import"
    assert document_kind({"variants": [{"streams": 2}], "layers": [{"name": "x"}]}) == "sweep"
    assert document_kind({"baseline": {}, "candidate": {}}) == "compare"
    assert document_kind({"capture": {}}) == "analyze"


@pytest.mark.parametrize("build,page", [(analysis_example, "analysis"), (sweep_example, "sweep"),
                                        (layers_example, "layers"), (compare_example, "compare")])
def test_the_report_renders_the_page_of_the_document_kind(build, page, tmp_path):
    data = build()
    kind = document_kind(data)
    assert PAGE_OF_KIND[kind] == page
    html = write_report({**data, "kind": kind}, tmp_path / "r.html", cdn=True).read_text()
    assert "<title>trtprof" in html and html.count('<section class="sec"') >= 3


def test_the_import_document_says_its_kind(trtexec_fixtures):
    from profiler.layers.importer import build_import

    data, _ = build_import([str(trtexec_fixtures / "tests" / "inputs")])
    assert data["kind"] == "import" and document_kind(data) == "import"
