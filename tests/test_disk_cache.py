"""The on-disk cache (perfmodel/disk_cache.py) of table-class verdicts and of the tables' lines
(perfmodel.cost.tables.build_class, ClassTable): a hit gives what judging and interpolating give, bit for bit, any
input that judging reads changes the key, a table whose lines are on disk prices none of its rows, and a cache that
is corrupt, unwritable or switched off is a miss, never an error."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from perfmodel import disk_cache
from perfmodel.cost import _alone_time
from perfmodel.cost import tables as T
from perfmodel.paths import calibration_dir, repo_root
from perfmodel.spec import spec_with


@pytest.fixture(scope="module")
def gemm_class():
    """(the smallest GEMM class of the H200's TensorRT-LLM table, the folder's fit profile, its part's spec)."""
    folder = T.load_folder(calibration_dir() / "h200-sxm-trtllm")
    prof, hw = T.folder_fit(folder)
    classes = [c for kernels in folder.rows.values() for c in kernels.values() if c.key[0] == "gemm"]
    return min(classes, key=len), prof, hw


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "cache"))
    yield tmp_path / "cache"
    disk_cache.flush()  # what the test left for exit goes to its own folder


@pytest.fixture
def judged(monkeypatch):
    """Counts the calls of tables.judge."""
    calls = []
    real = T.judge

    def counting(*args, **kw):
        calls.append(args[0])
        return real(*args, **kw)

    monkeypatch.setattr(T, "judge", counting)
    return calls


def _build(cls, prof, hw):
    return T.build_class(cls, prof, hw, _alone_time, holdout=0.25, seed=0)


def _same(a: T.ClassTable | None, b: T.ClassTable | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.key == b.key and np.array_equal(a.interpolant.values, b.interpolant.values)
            and np.array_equal(a.interpolant.x, b.interpolant.x) and np.array_equal(a.ladder, b.ladder))


def test_a_hit_is_what_judging_gives_and_judges_nothing(gemm_class, cache, judged):
    cls, prof, hw = gemm_class
    first = _build(cls, prof, hw)
    assert judged == [cls.key] and list(cache.glob("table-verdicts-*.json"))
    second = _build(cls, prof, hw)
    assert judged == [cls.key], "the second build reads the verdict"
    assert _same(first, second)


def test_a_changed_input_misses(gemm_class, cache, judged):
    cls, prof, hw = gemm_class
    _build(cls, prof, hw)
    key = T.verdict_key(cls, prof, hw, _alone_time, 0.25, 0)
    slower = T.ClassRows(cls.key, cls.kernel, cls.template, cls.dims, cls.times * 1.01, cls.main)
    other_profile = prof.with_(gemm_overhead_s=prof.gemm_overhead_s * 1.5)
    for changed in (T.verdict_key(slower, prof, hw, _alone_time, 0.25, 0),
                    T.verdict_key(cls, other_profile, hw, _alone_time, 0.25, 0),
                    T.verdict_key(cls, prof, hw, _alone_time, 0.3, 0),
                    T.verdict_key(cls, prof, hw, _alone_time, 0.25, 1)):
        assert changed is not None and changed != key
    _build(slower, prof, hw)
    assert judged == [cls.key, cls.key]


def test_a_what_if_figure_judges_again(gemm_class, cache, judged):
    cls, prof, hw = gemm_class
    _build(cls, prof, hw)
    what_if = spec_with(hw, hbm_bandwidth=hw.hbm_bandwidth * 2)
    assert T.verdict_key(cls, prof, what_if, _alone_time, 0.25, 0) != T.verdict_key(cls, prof, hw, _alone_time,
                                                                                      0.25, 0)
    _build(cls, prof, what_if)
    assert len(judged) == 2


def test_a_price_outside_the_package_is_not_cached(gemm_class):
    cls, prof, hw = gemm_class
    assert T.verdict_key(cls, prof, hw, lambda op, hw, prof: _alone_time(op, hw, prof), 0.25, 0) is None


def test_a_corrupt_cache_file_is_ignored_and_replaced(gemm_class, cache, judged):
    cls, prof, hw = gemm_class
    cache.mkdir()
    file = cache / f"{T.VERDICTS}-{disk_cache.code_stamp()[:16]}.json"
    file.write_bytes(b"\x00{not json")
    table = _build(cls, prof, hw)
    assert judged == [cls.key]
    disk_cache._READ.clear()  # as a fresh process would: read the file again
    assert _same(_build(cls, prof, hw), table) and judged == [cls.key]


@pytest.mark.parametrize("where", ["a file", "off"])
def test_an_unusable_cache_is_a_miss(gemm_class, tmp_path, monkeypatch, judged, where):
    cls, prof, hw = gemm_class
    if where == "off":
        monkeypatch.setenv("PERFMODEL_CACHE_DIR", "")
    else:
        (tmp_path / "plain").write_text("")
        monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "plain"))  # not a folder: cannot be written
    first = _build(cls, prof, hw)
    second = _build(cls, prof, hw)
    assert len(judged) == 2 and _same(first, second)


def test_the_default_place(monkeypatch, tmp_path):
    monkeypatch.delenv("PERFMODEL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert disk_cache.cache_dir() == tmp_path / "perfmodel"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert disk_cache.cache_dir() == tmp_path / ".cache" / "perfmodel"


# --- the tables' lines, and a table built from a kept verdict ------------------------------------------------------

def _shapes(cls) -> list[np.ndarray]:
    """GEMM shapes inside the class's range, off its measured grid (the local plane prices some of them)."""
    rng = np.random.default_rng(5)
    lo, hi = np.log2(cls.dims.min(axis=0)), np.log2(cls.dims.max(axis=0))
    return list(np.round(2.0 ** rng.uniform(lo, hi, size=(40, 3))).T)


def _fresh_process():
    """What a new process knows: only the files (what this one held for its exit written first)."""
    disk_cache.flush()
    disk_cache._READ.clear()


def test_a_table_from_a_kept_verdict_prices_as_the_judged_one_without_its_rows(gemm_class, cache, monkeypatch):
    cls, prof, hw = gemm_class
    shapes = _shapes(cls)
    judged = _build(cls, prof, hw)
    want = judged.ratio(shapes)
    assert np.isfinite(want).all() and judged.stored is not None
    _fresh_process()
    monkeypatch.setattr(T, "fitted_times", lambda *a: pytest.fail("a kept line prices the class's rows again"))
    kept = _build(cls, prof, hw)
    assert kept.stored == judged.stored and kept._interpolant is None
    got = kept.ratio(shapes)
    assert np.array_equal(got, want), "the kept lines are the judged table's, bit for bit"
    assert kept._interpolant is None
    assert np.array_equal(kept.raw_lo, judged.raw_lo) and np.array_equal(kept.raw_hi, judged.raw_hi)
    assert np.array_equal(kept.ladder, judged.ladder)


def test_a_line_not_on_disk_is_interpolated_as_before(gemm_class, cache):
    cls, prof, hw = gemm_class
    shapes = _shapes(cls)
    judged = _build(cls, prof, hw)  # nothing asked of it: no line on disk
    _fresh_process()
    kept = _build(cls, prof, hw)
    assert np.array_equal(kept.ratio(shapes), judged.ratio(shapes))
    assert kept._interpolant is not None, "the lines it lacked were interpolated from its rows"
    assert _same(kept, judged)


def test_a_corrupt_kept_verdict_or_line_is_a_miss(gemm_class, cache, judged):
    cls, prof, hw = gemm_class
    shapes = _shapes(cls)
    want = _build(cls, prof, hw).ratio(shapes)
    _fresh_process()
    for file in cache.glob("*.json"):
        entries = json.loads(file.read_text())
        broken = ["not base64!", "AAAA", 3, None, {"lo": "AAAA"}, True]
        file.write_text(json.dumps({k: broken[i % len(broken)] for i, k in enumerate(entries)}))
    table = _build(cls, prof, hw)
    assert judged == [cls.key, cls.key], "a verdict that is no verdict is judged again"
    assert np.array_equal(table.ratio(shapes), want)


def test_put_later_is_seen_at_once_written_at_exit_and_bounded(cache):
    disk_cache.put_later("test-later", "a", 1, keep=2)
    assert disk_cache.get("test-later", "a") == 1 and not cache.exists()
    disk_cache.put_later("test-later", "b", 2, keep=2)
    disk_cache.put_later("test-later", "c", 3, keep=2)
    disk_cache.flush()
    (file,) = cache.glob("test-later-*.json")
    assert json.loads(file.read_text()) == {"b": 2, "c": 3}, "the newest two kept"
    disk_cache._READ.clear()
    assert disk_cache.get("test-later", "a") is None and disk_cache.get("test-later", "c") == 3


def test_put_later_into_an_unusable_cache_is_nothing(tmp_path, monkeypatch):
    (tmp_path / "plain").write_text("")
    monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "plain" / "under-a-file"))
    disk_cache.put_later("test-later", "a", 1)
    disk_cache.flush()
    monkeypatch.setenv("PERFMODEL_CACHE_DIR", "")
    disk_cache.put_later("test-later", "a", 1)
    assert disk_cache.get("test-later", "a") is None
    disk_cache.flush()


def test_floats_are_packed_exactly():
    values = np.array([0.1, -0.0, 1e-310, np.inf, -np.inf, np.nan, 2.0 ** 60 + 1, np.nextafter(1.0, 2.0)])
    back = disk_cache.unpack(disk_cache.pack(values))
    assert back.dtype == np.float64 and back.tobytes() == values.tobytes()
    assert disk_cache.unpack(disk_cache.pack([])).size == 0
    for bad in ("AAAA", "not base64", None, 7, ["AAAAAAAAAAA="]):
        assert disk_cache.unpack(bad) is None


def test_a_projection_with_a_warm_cache_needs_no_scipy_spatial(tmp_path):
    """A fresh process: the first (empty cache) interpolates and imports scipy.spatial for the local plane, the
    second finds every line it needs on disk."""
    code = ("import sys\nfrom perfmodel import project\np = project('h200-sxm', 'llama-3.1-70b', tp=8)\n"
            "print('scipy.spatial' in sys.modules, repr(p.ttft_s), repr(p.tpot_s))")
    env = {**os.environ, "PERFMODEL_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-c", code], cwd=repo_root(), env=env, capture_output=True, text=True,
                           check=True).stdout.split() for _ in range(2)]
    assert [r[0] for r in runs] == ["True", "False"]
    assert runs[0][1:] == runs[1][1:], "the same projection, bit for bit"
