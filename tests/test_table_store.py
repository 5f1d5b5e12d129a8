"""The whole measured tables as compact arrays (perfmodel.cost.table_store): exact shapes, times within the stated
quantization, the same bytes for the same tables, a held-out split by shape, one-line errors for a bad file, and a
projection's lazy reading (each class decoded when first asked for) the same as reading them all."""
from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from perfmodel.cost import tables as T
from perfmodel.cost.table_store import FILE, ClassRows, decode, decode_lazily, encode, quantization_error
from perfmodel.errors import InputError


def _classes(seed: int = 0) -> list[ClassRows]:
    rng = np.random.default_rng(seed)
    grid = np.array([(m, n, k) for m in (1, 2, 3, 17, 4096, 4097) for n in (128, 8192) for k in (64, 65536)],
                    dtype=float)
    sparse = rng.integers(1, 4000, size=(50, 6)).astype(float)
    sparse = np.unique(sparse, axis=0)
    return [ClassRows(("gemm", "bf16"), "torch_flow", {"dtype": "bf16"}, grid,
                      1e-6 * grid[:, 0] * grid[:, 1] * grid[:, 2] ** 0.5 * rng.uniform(0.9, 1.1, len(grid))),
            ClassRows(T.attention_key("trtllm", "bf16", "fp8", 128, 128, True, False, True), "torch_flow",
                      {"dtype": "bf16", "kv_dtype": "fp8", "head_dim": 128, "packed": True}, sparse[:, :4],
                      rng.uniform(3e-6, 9e-3, len(sparse)))]


def test_round_trip_keeps_shapes_exactly_and_times_within_the_quantization():
    classes = _classes()
    back, provenance = decode(encode(classes, {"source": "test"}))
    assert provenance == {"source": "test"}
    for a, b in zip(classes, back):
        assert b.key == a.key and b.kernel == a.kernel and b.template == a.template
        order = np.lexsort(a.dims.T[::-1]), np.lexsort(b.dims.T[::-1])
        assert np.array_equal(a.dims[order[0]], b.dims[order[1]])
        rel = np.abs(b.times[order[1]] / a.times[order[0]] - 1)
        assert rel.max() <= quantization_error() * 1.0001 and quantization_error() < 4e-4


def test_the_same_tables_give_the_same_bytes_whatever_the_row_order():
    classes = _classes()
    shuffled = [ClassRows(c.key, c.kernel, c.template, c.dims[::-1], c.times[::-1]) for c in classes]
    assert encode(classes) == encode(shuffled)


def test_held_out_by_shape_a_quarter_and_the_same_in_every_format():
    rng = np.random.default_rng(1)
    dims = np.unique(rng.integers(1, 10**6, size=(4000, 3)).astype(float), axis=0)
    a = ClassRows(("gemm", "bf16"), "k", {}, dims, np.ones(len(dims)))
    b = ClassRows(("gemm", "fp8"), "other", {}, dims, np.ones(len(dims)))
    held = a.held_out(0.25, 0)
    assert abs(held.mean() - 0.25) < 0.03
    assert np.array_equal(held, b.held_out(0.25, 0))  # the shape decides, not the format or kernel
    assert not np.array_equal(held, a.held_out(0.25, 1))  # another seed, another split
    assert np.all(a.held_out(0.1, 0) <= held)  # a smaller share holds out a subset


@pytest.mark.parametrize("bad", [b"", b"not a zip", b"PK\x03\x04garbage"])
def test_a_bad_file_is_one_line_naming_it(tmp_path, bad):
    (tmp_path / FILE).write_bytes(bad)
    with pytest.raises(InputError) as e:
        T.folder_classes(tmp_path)
    assert FILE in str(e.value) and "\n" not in str(e.value)


def test_a_class_measured_twice_at_one_shape_is_refused():
    c = _classes()[0]
    twice = ClassRows(c.key, c.kernel, c.template, np.vstack([c.dims, c.dims[:1]]), np.append(c.times, 1e-5))
    with pytest.raises(ValueError, match="measured twice"):
        encode([twice])


def test_lazy_reading_gives_every_class_as_reading_them_all(tmp_path):
    classes = _classes()
    classes.append(ClassRows(classes[0].key, "other_kernel", classes[0].template, classes[0].dims,
                             classes[0].times * 2, main=False))
    (tmp_path / FILE).write_bytes(encode(classes, {"source": "test"}))
    eager, provenance = decode(tmp_path / FILE)
    lazy, lazy_provenance = decode_lazily(tmp_path / FILE)
    assert lazy_provenance == provenance and sorted(lazy) == sorted({c.key for c in eager})
    assert lazy[classes[0].key].main == ["torch_flow"] and list(lazy[classes[0].key]) == ["torch_flow", "other_kernel"]
    for c in eager:
        got = lazy[c.key][c.kernel]
        assert (got.key, got.kernel, got.template, got.main) == (c.key, c.kernel, c.template, c.main)
        assert np.array_equal(got.dims, c.dims) and np.array_equal(got.times, c.times)
        assert lazy[c.key][c.kernel] is got, "decoded once"


def test_a_bad_class_read_lazily_is_one_line_naming_the_file_when_asked_for(tmp_path):
    data = encode(_classes())
    src, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:  # the second class's times cut short
        for name in src.namelist():
            dst.writestr(name, src.read(name)[:-6] if name == "c1_time.npy" else src.read(name))
    (tmp_path / FILE).write_bytes(out.getvalue())
    lazy, _ = decode_lazily(tmp_path / FILE)
    first = _classes()[0]
    assert np.array_equal(lazy[first.key][first.kernel].times, decode(data)[0][0].times)
    second = _classes()[1]
    with pytest.raises(InputError) as e:
        lazy[second.key][second.kernel]
    assert FILE in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("bad", [b"", b"not a zip", b"PK\x03\x04garbage"])
def test_a_bad_file_read_lazily_is_one_line_naming_it(tmp_path, bad):
    (tmp_path / FILE).write_bytes(bad)
    with pytest.raises(InputError) as e:
        decode_lazily(tmp_path / FILE)
    assert FILE in str(e.value) and "\n" not in str(e.value)
