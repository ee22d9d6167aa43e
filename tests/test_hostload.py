"""profiler.harness.hostload: the share of the host's CPU other processes took during a timed phase."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from profiler.harness.hostload import HostLoad, others_share, read_proc_stat


def test_proc_stat_line_counts_steal_as_busy_and_iowait_as_free(tmp_path):
    f = tmp_path / "stat"
    #            user nice system idle iowait irq softirq steal guest guest_nice
    f.write_text("cpu  100 5 20 800 50 3 2 20 7 0\ncpu0 1 2 3 4\n")
    busy, total = read_proc_stat(f)
    assert total == 100 + 5 + 20 + 800 + 50 + 3 + 2 + 20  # guest is inside user already
    assert busy == total - 800 - 50
    f.write_text("intr 1 2 3\n")
    assert read_proc_stat(f) is None
    assert read_proc_stat(tmp_path / "absent") is None


def test_others_share_subtracts_own_time_and_clips():
    # 2 CPUs, 1 s at 100 ticks/s: 200 ticks; 120 busy of which this process used 0.5 s (50 ticks)
    assert others_share((0, 0), (120, 200), 0.5, clk_tck=100) == pytest.approx(70 / 200)
    assert others_share((0, 0), (40, 200), 0.5, clk_tck=100) == 0.0  # tick rounding: never negative
    assert others_share((10, 10), (10, 10), 0.0) is None


def test_fake_counters_give_the_share_and_unreadable_counters_give_none():
    ticks = iter([(0, 0), (150, 400)])
    own = iter([1.0, 1.5])
    with HostLoad(stat=lambda: next(ticks), own=lambda: next(own)) as load:
        pass
    assert load.others_share == pytest.approx((150 - 0.5 * os.sysconf("SC_CLK_TCK")) / 400)
    with HostLoad(stat=lambda: None) as blind:
        pass
    assert blind.others_share is None


@pytest.mark.skipif(read_proc_stat() is None, reason="/proc/stat is not readable here")
def test_a_busy_child_process_shows_as_others_load():
    spin = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<3: pass"])
    try:
        time.sleep(0.5)  # the child is past its start-up
        with HostLoad() as load:
            time.sleep(0.8)
    finally:
        spin.kill()
        spin.wait()
    ncpu = os.cpu_count() or 1
    assert load.others_share is not None and 0.6 / ncpu <= load.others_share <= 1.0


@pytest.mark.parametrize("value, want", [("0.35", 0.35), ("0", 0.0), ("1", 1.0), ("unknown", None), (" UNKNOWN ", None)])
def test_an_injected_share_replaces_the_probe(monkeypatch, value, want):
    monkeypatch.setenv("TRTPROF_HOST_LOAD", value)

    def never() -> tuple[int, int]:
        raise AssertionError("the counters were read although a share was injected")

    with HostLoad(stat=never, own=never) as load:
        pass
    assert load.others_share == want


@pytest.mark.parametrize("value", ["nan", "-0.1", "1.5", "inf", "busy"])
def test_a_wrong_injected_share_is_one_usage_sentence(monkeypatch, value):
    from profiler.errors import UsageError

    monkeypatch.setenv("TRTPROF_HOST_LOAD", value)
    with pytest.raises(UsageError, match=r"^TRTPROF_HOST_LOAD=.* is neither a share of the host's CPU from 0 to 1 "):
        HostLoad().__enter__()


def test_an_empty_override_leaves_the_probe_in_place(monkeypatch):
    monkeypatch.setenv("TRTPROF_HOST_LOAD", "")
    ticks = iter([(0, 0), (100, 400)])
    own = iter([0.0, 0.0])
    with HostLoad(stat=lambda: next(ticks), own=lambda: next(own)) as load:
        pass
    assert load.others_share == pytest.approx(100 / 400)


def test_sweep_refuses_a_wrong_override_before_it_builds_anything(tmp_path):
    env = {**os.environ, "TRTPROF_HOST_LOAD": "2"}
    r = subprocess.run([sys.executable, "-m", "profiler", "--db", str(tmp_path / "t.db"), "sweep", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == ["trtprof: error: TRTPROF_HOST_LOAD='2' is neither a share of the host's CPU "
                                             "from 0 to 1 nor 'unknown'"]
    assert not (tmp_path / "t.db").exists() and not (tmp_path / "o").exists()
