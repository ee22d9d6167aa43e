"""The golden guard: the analysis document of every capture we have, as a committed digest.

A change to the analysis that is not meant to change what users are told must leave every digest as it
is; a change that is meant to shows which captures it moved, and the digests are refreshed with it:

    python3 -m tests.golden check     # which captures' documents differ from the committed digests
    python3 -m tests.golden refresh   # analyse every capture and write tests/golden/analysis.json
    python3 -m tests.golden refresh sample_traces/race_threads ...   # only these captures' digests

``tests/test_capture_paths.py`` checks each capture's cold document against its digest (the document it
computes anyway), so the guard costs the suite no analysis of its own. The document is the one
``trtprof analyze --json`` writes (with its timeline), less the capture's path, which names the folder
it was read from. Digests are tied to the numpy, pandas and pyarrow versions they were made with: under
other versions the check skips, saying so, since the last digits of a statistic may move with them.
"""

from __future__ import annotations

import hashlib
import json
import sys
from importlib import metadata
from pathlib import Path

from tests.conftest import SAMPLE_TRACES, SHARED

GOLDEN = Path(__file__).resolve().parent / "golden" / "analysis.json"
LIBRARIES = ("numpy", "pandas", "pyarrow")
#: Folders of captures under ../shared/fixtures whose documents are guarded (absent ones are skipped).
FIXTURE_FOLDERS = ("nsys", "nsys-tensorrt", "nsys-real")


def captures() -> list[Path]:
    """Every capture the guard covers: the shared fixtures that are present, then the sample traces."""
    found = [p for folder in FIXTURE_FOLDERS for p in sorted((SHARED / "fixtures" / folder).glob("*.sqlite"))]
    return found + sorted(SAMPLE_TRACES.glob("*.sqlite"))


def name_of(path: Path) -> str:
    """The capture's key in the digest file: its folder and stem (``nsys-real/realcugan_...``)."""
    return f"{path.parent.name}/{path.stem}"


def libraries() -> dict[str, str]:
    return {lib: metadata.version(lib) for lib in LIBRARIES}


def digest(text: str) -> str:
    """SHA-256 of the document ``text`` with the capture's path reduced to its file name."""
    doc = json.loads(text)
    source = doc.get("capture", {}).get("source_path")
    if source:
        doc["capture"]["source_path"] = Path(source).name
    return hashlib.sha256(json.dumps(doc, sort_keys=True, allow_nan=False).encode()).hexdigest()


def document_text(path: Path) -> str:
    """What ``trtprof analyze --json`` writes for ``path``, analysed cold."""
    from profiler.capture.analyze import analyze_path

    result = analyze_path(path, cache=False)
    data = result.to_json()
    data["timeline"] = result.timeline_json(data)
    return json.dumps(data, indent=1, allow_nan=False)


def committed() -> dict:
    return json.loads(GOLDEN.read_text()) if GOLDEN.is_file() else {"libraries": {}, "captures": {}}


def mismatch(path: Path, text: str) -> str | None:
    """Why ``text`` (the cold document of ``path``) fails the guard; None when it passes."""
    want = committed()["captures"].get(name_of(path))
    if want is None:
        return f"{name_of(path)} has no committed digest: run `python3 -m tests.golden refresh` and commit it"
    if digest(text) != want:
        return (f"the analysis of {name_of(path)} changed (digest {digest(text)[:12]}, committed {want[:12]}): "
                "if the change is meant, say why in the commit and run `python3 -m tests.golden refresh`")
    return None


def same_libraries() -> str | None:
    """None when the digests were made with the libraries installed here, else why they cannot be checked."""
    made = committed()["libraries"]
    here = libraries()
    return None if made == here else f"golden digests were made with {made}, this environment has {here}"


def _main(argv: list[str]) -> int:
    command, only = (argv[0], set(argv[1:])) if argv else ("", set())
    paths = captures()
    if command not in ("check", "refresh") or (only and command != "refresh"):
        print("usage: python3 -m tests.golden check | refresh [FOLDER/NAME ...]", file=sys.stderr)
        return 2
    if only - {name_of(p) for p in paths}:
        print(f"no such capture: {', '.join(sorted(only - {name_of(p) for p in paths}))}", file=sys.stderr)
        return 2
    paths = [p for p in paths if not only or name_of(p) in only]
    digests = {name_of(p): digest(document_text(p)) for p in paths}
    old = committed()["captures"]
    moved = sorted(k for k, v in digests.items() if old.get(k) != v)
    if command == "refresh":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        keep = {k: v for k, v in old.items()
                if k not in digests and (only or not k.startswith("sample_traces/"))}
        GOLDEN.write_text(json.dumps({"libraries": libraries(), "captures": {**keep, **digests}}, indent=1,
                                     sort_keys=True) + "\n")
        print(f"{len(digests)} captures analysed, {len(moved)} digest(s) new or changed: {', '.join(moved) or '-'}")
        return 0
    print(f"{len(digests)} captures analysed, {len(moved)} differ from the committed digests"
          + "".join(f"\n  {k}" for k in moved))
    return 1 if moved else 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
