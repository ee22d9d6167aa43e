

def test_distinct_rows_equal_the_sorted_set_of_rows():
    import numpy as np

    from profiler.capture.concurrency import _distinct_rows

    rng = np.random.default_rng(3)
    for n in (0, 1, 500):
        cols = [rng.integers(-3, 4, n), np.broadcast_to(np.int64(7), (n,)), rng.integers(0, 2**40, n) % 5]
        assert _distinct_rows(*cols) == sorted(set(zip(*(c.tolist() for c in cols))))
