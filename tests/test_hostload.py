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
