"""The on-disk cache of table-class verdicts (perfmodel/disk_cache.py, perfmodel.cost.tables.build_class): a hit
gives what judging gives, any input that judging reads changes the key, and a cache that is corrupt, unwritable or
switched off is a miss, never an error."""
from __future__ import annotations

import numpy as np
import pytest

from perfmodel import disk_cache
from perfmodel.cost import _alone_time
from perfmodel.cost import tables as T
from perfmodel.paths import calibration_dir
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
    return tmp_path / "cache"


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
