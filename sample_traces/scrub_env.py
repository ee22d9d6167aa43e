#!/usr/bin/env python3
"""Blank what ``scrub-trace.py`` leaves of the capturing machine in an nsys SQLite export.

``scrub-trace.py`` (the workplace's scrubber) blanks ``TARGET_INFO_SYSTEM_ENV`` and the export's host and
user. nsys also writes the profiled process's environment and the machine's display name into
``META_DATA_CAPTURE`` and copies ``NAME=value`` environment strings into ``StringIds``. This blanks those
too. None of them is a name the analysis reads: the analysis JSON of every sample is the same before and
after.

    python3 sample_traces/scrub_env.py FILE.sqlite ...
"""

import re
import sqlite3
import sys

ENV_STRING = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def scrub(path: str) -> int:
    con = sqlite3.connect(path)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    changed = 0
    if "META_DATA_CAPTURE" in tables:
        changed += con.execute("UPDATE META_DATA_CAPTURE SET value='' WHERE value != '' AND "
                               "(name LIKE '%ENVIRONMENT_VARIABLE%' OR name = 'DEVICE_DISPLAY_NAME')").rowcount
    if "StringIds" in tables:
        ids = [i for i, v in con.execute("SELECT id, value FROM StringIds") if isinstance(v, str) and ENV_STRING.match(v)]
        con.executemany("UPDATE StringIds SET value='' WHERE id=?", [(i,) for i in ids])
        changed += len(ids)
    con.commit()
    con.execute("VACUUM")
    con.close()
    return changed


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(f"{p}: {scrub(p)} value(s) blanked")
