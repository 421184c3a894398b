"""Tests of plasticlab.data: locating, parsing, validating, downloading and caching datasets.

Real data (MNIST, the CIFAR-10 subset) is found through $PLASTICLAB_DATA, else
<repo>/../shared/data; tests that need it skip, saying so, when neither exists. Everything
else runs on small files in the official formats that the tests write themselves. No test
touches the network: the one network function, plasticlab.data.download._download, is
replaced by a guard in every test and by local fakes where a download is exercised.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import pickle
import shutil
import struct
import tarfile
from pathlib import Path

import numpy as np
import platformdirs
import pytest

import plasticlab.data.cifar as cifar_module
import plasticlab.data.download as download_module
from plasticlab.data import (
    FETCHERS,
    DataError,
    ImageDataset,
    fetch_datasets,
    imagenet32_class_path,
    imagenet32_num_classes,
    load_cifar10,
    load_cifar100,
    load_imagenet32_class,
    load_mnist,
    load_npz,
    parse_idx,
    resolve_data_dir,
)
from plasticlab.problems import PROBLEMS

REPO = Path(__file__).resolve().parents[1]

MNIST_STEMS = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
MNIST_MD5 = {
    "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
    "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
    "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
}


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Make any attempt to download fail loudly instead of reaching the network."""

    def forbidden(url, md5, dest_dir):
        raise AssertionError(f"test tried to download {url}")

    monkeypatch.setattr(download_module, "_download", forbidden)


def copy_mnist(src: Path, dest_root: Path, raw: bool = False) -> Path:
    """Copy the real MNIST files to dest_root/mnist, decompressed when raw=True."""
    dest = dest_root / "mnist"
    dest.mkdir(parents=True)
    for stem in MNIST_STEMS:
        source = src / stem if (src / stem).is_file() else src / f"{stem}.gz"
        data = source.read_bytes()
        if source.suffix == ".gz" and raw:
            (dest / stem).write_bytes(gzip.decompress(data))
        elif source.suffix == ".gz":
            (dest / f"{stem}.gz").write_bytes(data)
        elif raw:
            (dest / stem).write_bytes(data)
        else:
            (dest / f"{stem}.gz").write_bytes(gzip.compress(data, compresslevel=1))
    return dest


def idx_bytes(array: np.ndarray) -> bytes:
    """Encode an array in the IDX format (big-endian)."""
    codes = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C, np.float32: 0x0D}
    code = codes[array.dtype.type]
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def cifar_images(n: int, seed: int) -> np.ndarray:
    """Random (n, 3072) uint8 rows in the official layout (R plane, G plane, B plane)."""
    return np.random.default_rng(seed).integers(0, 256, size=(n, 3072), dtype=np.uint8)


def write_pickle(path: Path, obj: dict) -> None:
    # Protocol 2 as in the official (Python 2 cPickle) files; bytes keys as they come out
    # of the official files when read with encoding="bytes".
    path.write_bytes(pickle.dumps(obj, protocol=2))


def write_cifar10_folder(root: Path, per_batch: int = 20) -> tuple[np.ndarray, ...]:
    """Write cifar-10-batches-py/ under root; return (train data, train labels, test ...)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    train_data, train_labels = [], []
    for i in range(1, 6):
        data = cifar_images(per_batch, seed=i)
        labels = [(i + j) % 10 for j in range(per_batch)]
        write_pickle(
            folder / f"data_batch_{i}",
            {
                b"batch_label": f"training batch {i} of 5".encode(),
                b"labels": labels,
                b"data": data,
                b"filenames": [f"img_{i}_{j}.png".encode() for j in range(per_batch)],
            },
        )
        train_data.append(data)
        train_labels += labels
    test_data = cifar_images(per_batch, seed=99)
    test_labels = [j % 10 for j in range(per_batch)]
    write_pickle(
        folder / "test_batch",
        {b"batch_label": b"testing batch 1 of 1", b"labels": test_labels, b"data": test_data},
    )
    (folder / "batches.meta").write_bytes(pickle.dumps({b"num_cases_per_batch": per_batch}, 2))
    return np.concatenate(train_data), np.array(train_labels), test_data, np.array(test_labels)


def write_cifar100_folder(root: Path, n: int = 30) -> tuple[np.ndarray, ...]:
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    out = []
    for split, seed in (("train", 1), ("test", 2)):
        data = cifar_images(n, seed)
        fine = [(7 * j + seed) % 100 for j in range(n)]
        coarse = [f // 5 for f in fine]
        write_pickle(
            folder / split,
            {
                b"batch_label": split.encode(),
                b"fine_labels": fine,
                b"coarse_labels": coarse,
                b"data": data,
            },
        )
        out += [data, np.array(fine)]
    return tuple(out)


def make_tar_gz(folder: Path, archive: Path) -> str:
    """Pack folder (as its own top-level directory) into archive; return the archive's md5."""
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return hashlib.md5(archive.read_bytes()).hexdigest()


def patch_cifar_md5(monkeypatch, name: str, md5: str) -> None:
    spec = cifar_module.CIFAR_SPECS[name]
    monkeypatch.setitem(cifar_module.CIFAR_SPECS, name, dataclasses.replace(spec, archive_md5=md5))


def write_npz(path: Path, **overrides) -> None:
    rng = np.random.default_rng(0)
    arrays = {
        "x_train": rng.integers(0, 256, (12, 8, 8, 3), dtype=np.uint8),
        "y_train": np.arange(12) % 4,
        "x_test": rng.integers(0, 256, (4, 8, 8, 3), dtype=np.uint8),
        "y_test": np.arange(4, dtype=np.uint8),
    }
    arrays.update(overrides)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})


# --------------------------------------------------------------------------- data directory


def test_resolve_data_dir_prefers_explicit_argument_over_env(tmp_path, monkeypatch):
    monkeypatch.setenv("PLASTICLAB_DATA", str(tmp_path / "from-env"))
    assert resolve_data_dir(tmp_path / "explicit") == (tmp_path / "explicit").resolve()
    assert resolve_data_dir(str(tmp_path / "explicit")) == (tmp_path / "explicit").resolve()


def test_resolve_data_dir_uses_env_when_no_argument(tmp_path, monkeypatch):
    monkeypatch.setenv("PLASTICLAB_DATA", str(tmp_path / "from-env"))
    assert resolve_data_dir() == (tmp_path / "from-env").resolve()
    assert resolve_data_dir(None) == (tmp_path / "from-env").resolve()


def test_resolve_data_dir_falls_back_to_user_cache_when_env_unset_or_empty(monkeypatch):
    expected = Path(platformdirs.user_cache_dir("plasticlab")).resolve()
    monkeypatch.delenv("PLASTICLAB_DATA", raising=False)
    assert resolve_data_dir() == expected
    monkeypatch.setenv("PLASTICLAB_DATA", "")
    assert resolve_data_dir() == expected


def test_resolve_data_dir_expands_user_and_is_absolute(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_data_dir("~/data") == (tmp_path / "data").resolve()
    assert resolve_data_dir("relative").is_absolute()


# --------------------------------------------------------------------------- IDX parser


def test_parse_idx_reads_uint8_images_and_big_endian_int32():
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    assert np.array_equal(parse_idx(idx_bytes(images), "x"), images)
    ints = np.array([[1, -2, 70000]], dtype=np.int32)
    parsed = parse_idx(idx_bytes(ints), "x")
    assert parsed.dtype == np.int32 and parsed.dtype.isnative
    assert np.array_equal(parsed, ints)


def test_parse_idx_rejects_truncated_data_naming_the_file():
    raw = idx_bytes(np.zeros((5, 4), np.uint8))
    with pytest.raises(DataError, match=r"some/file.*truncated"):
        parse_idx(raw[:-3], "some/file")
    with pytest.raises(DataError, match=r"some/file.*truncated"):
        parse_idx(raw[:6], "some/file")  # cut inside the dimension sizes
    with pytest.raises(DataError, match=r"some/file.*truncated"):
        parse_idx(raw[:2], "some/file")


def test_parse_idx_rejects_trailing_bytes_bad_magic_and_unknown_type():
    raw = idx_bytes(np.zeros((5,), np.uint8))
    with pytest.raises(DataError, match="extra bytes"):
        parse_idx(raw + b"\x00", "f")
    with pytest.raises(DataError, match="not an IDX file"):
        parse_idx(gzip.compress(raw), "f.gz")
    with pytest.raises(DataError, match="element type 0x07"):
        parse_idx(bytes([0, 0, 0x07]) + raw[3:], "f")


# --------------------------------------------------------------------------- MNIST, real data


def test_real_mnist_files_match_official_decompressed_md5(real_mnist_dir):
    for stem in MNIST_STEMS:
        raw_path = real_mnist_dir / stem
        data = (
            raw_path.read_bytes()
            if raw_path.is_file()
            else gzip.decompress((real_mnist_dir / f"{stem}.gz").read_bytes())
        )
        assert hashlib.md5(data).hexdigest() == MNIST_MD5[stem], stem


def test_real_mnist_has_official_shapes_dtypes_and_label_counts(real_mnist_dir):
    ds = load_mnist(real_mnist_dir.parent, download=False)
    assert ds.name == "mnist"
    assert ds.x_train.shape == (60000, 28, 28) and ds.x_test.shape == (10000, 28, 28)
    assert ds.x_train.dtype == np.uint8 and ds.x_test.dtype == np.uint8
    assert ds.y_train.dtype == np.int64 and ds.y_test.dtype == np.int64
    assert ds.y_train.shape == (60000,) and ds.y_test.shape == (10000,)
    train_counts = np.bincount(ds.y_train, minlength=10)
    test_counts = np.bincount(ds.y_test, minlength=10)
    assert (train_counts[0], train_counts[1], train_counts[5]) == (5923, 6742, 5421)
    assert (test_counts[0], test_counts[1]) == (980, 1135)
    assert ds.num_classes == 10 and ds.image_shape == (28, 28)
    assert str(real_mnist_dir.resolve()) in ds.source


def test_mnist_second_load_is_cached_and_arrays_are_read_only(real_mnist_dir):
    first = load_mnist(real_mnist_dir.parent, download=False)
    second = load_mnist(real_mnist_dir.parent, download=False)
    assert np.shares_memory(first.x_train, second.x_train)
    for array in (second.x_train, second.y_train, second.x_test, second.y_test):
        assert not array.flags.writeable
        with pytest.raises(ValueError):
            array[0] = 1
        with pytest.raises(ValueError):
            array.setflags(write=True)  # a caller cannot unlock the shared cache


def test_mnist_raw_idx_files_load_identically_to_gz(real_mnist_dir, tmp_path):
    copy_mnist(real_mnist_dir, tmp_path, raw=True)
    assert not list((tmp_path / "mnist").glob("*.gz"))
    raw = load_mnist(tmp_path, download=False)
    gz = load_mnist(real_mnist_dir.parent, download=False)
    assert np.array_equal(raw.x_train, gz.x_train) and np.array_equal(raw.y_test, gz.y_test)
    assert "train-images-idx3-ubyte," in raw.source


def test_mnist_truncated_gz_raises_data_error_naming_the_file(real_mnist_dir, tmp_path):
    dest = copy_mnist(real_mnist_dir, tmp_path)
    target = dest / "train-labels-idx1-ubyte.gz"
    target.write_bytes(target.read_bytes()[:5000])
    with pytest.raises(DataError) as info:
        load_mnist(tmp_path, download=False)
    assert str(target) in str(info.value)
    assert "truncated" in str(info.value) and "download it again" in str(info.value)


def test_mnist_truncated_raw_file_raises_data_error_naming_the_file(real_mnist_dir, tmp_path):
    dest = copy_mnist(real_mnist_dir, tmp_path, raw=True)
    target = dest / "t10k-images-idx3-ubyte"
    target.write_bytes(target.read_bytes()[:-784])
    with pytest.raises(DataError, match="truncated") as info:
        load_mnist(tmp_path, download=False)
    assert str(target) in str(info.value)


def test_mnist_corrupted_byte_fails_md5_check_naming_the_file(real_mnist_dir, tmp_path):
    dest = copy_mnist(real_mnist_dir, tmp_path, raw=True)
    target = dest / "t10k-images-idx3-ubyte"
    data = bytearray(target.read_bytes())
    data[5000] ^= 0xFF  # a pixel: the IDX structure stays valid, only the MD5 can tell
    target.write_bytes(bytes(data))
    with pytest.raises(DataError, match="MD5") as info:
        load_mnist(tmp_path, download=False)
    message = str(info.value)
    assert str(target) in message and "Delete it and download it again" in message


def test_mnist_corrupted_byte_in_gz_raises_data_error(real_mnist_dir, tmp_path):
    dest = copy_mnist(real_mnist_dir, tmp_path)
    target = dest / "t10k-labels-idx1-ubyte.gz"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(DataError) as info:
        load_mnist(tmp_path, download=False)
    assert str(target) in str(info.value)


def test_mnist_download_fetches_missing_files_with_official_urls(
    real_mnist_dir, tmp_path, monkeypatch
):
    calls = []

    def fake_download(url, md5, dest_dir):
        calls.append((url, md5, Path(dest_dir)))
        name = url.rsplit("/", 1)[-1]
        shutil.copy(real_mnist_dir / name, Path(dest_dir) / name)
        return Path(dest_dir) / name

    monkeypatch.setattr(download_module, "_download", fake_download)
    ds = load_mnist(tmp_path, download=True)
    assert ds.x_train.shape == (60000, 28, 28)
    assert [c[0] for c in calls] == [
        f"https://ossci-datasets.s3.amazonaws.com/mnist/{stem}.gz" for stem in MNIST_STEMS
    ]
    assert calls[0][1] == "f68b3c2dcbeaaa9fbdd348bbdeb94873"  # md5 of the original .gz
    assert all(dest == (tmp_path / "mnist").resolve() for _, _, dest in calls)


# --------------------------------------------------------------------------- MNIST, no real data


def test_mnist_missing_file_names_file_directory_and_url(tmp_path):
    with pytest.raises(DataError) as info:
        load_mnist(tmp_path, download=False)
    message = str(info.value)
    mnist_dir = (tmp_path / "mnist").resolve()
    assert str(mnist_dir / "train-images-idx3-ubyte.gz") in message
    assert f"missing from {mnist_dir}" in message
    assert "https://ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz" in message
    assert str(mnist_dir / "t10k-labels-idx1-ubyte.gz") in message  # all four are named
    assert "PLASTICLAB_DATA" in message


def test_mnist_one_missing_file_is_named_alone(real_mnist_dir, tmp_path):
    dest = copy_mnist(real_mnist_dir, tmp_path)
    for path in dest.glob("t10k-images-idx3-ubyte*"):
        path.unlink()
    with pytest.raises(DataError) as info:
        load_mnist(tmp_path, download=False)
    message = str(info.value)
    assert str(dest.resolve() / "t10k-images-idx3-ubyte.gz") in message
    assert "train-images" not in message


def test_mnist_download_failure_says_which_file_where_and_how_to_fix(tmp_path, monkeypatch):
    def offline(url, md5, dest_dir):
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr(download_module, "_download", offline)
    with pytest.raises(DataError) as info:
        load_mnist(tmp_path, download=True)
    message = str(info.value)
    mnist_dir = (tmp_path / "mnist").resolve()
    assert "train-images-idx3-ubyte.gz is missing from " + str(mnist_dir) in message
    assert "https://ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz" in message
    assert "Name or service not known" in message
    assert f"put it at {mnist_dir / 'train-images-idx3-ubyte.gz'}" in message


def test_a_failed_download_takes_back_the_folders_it_made_and_no_others(tmp_path, monkeypatch):
    # a mistyped --data-dir with no network: no tree of empty folders left behind
    def offline(url, md5, dest_dir):
        assert dest_dir.is_dir()  # made for the download
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr(download_module, "_download", offline)
    typo = tmp_path / "shred" / "data"
    with pytest.raises(DataError, match="Name or service not known"):
        load_mnist(typo, download=True)
    assert list(tmp_path.iterdir()) == []
    # a folder that was there stays, and so does one a file was put in meanwhile
    (tmp_path / "data").mkdir()
    with pytest.raises(DataError):
        load_mnist(tmp_path / "data", download=True)
    assert [p.name for p in tmp_path.iterdir()] == ["data"] and not any((tmp_path / "data").iterdir())

    def offline_after_a_file(url, md5, dest_dir):
        (dest_dir / "notes.txt").write_text("mine")
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr(download_module, "_download", offline_after_a_file)
    with pytest.raises(DataError):
        load_mnist(tmp_path / "data", download=True)
    assert (tmp_path / "data" / "mnist" / "notes.txt").read_text() == "mine"


def test_mnist_well_formed_but_unofficial_files_are_rejected_by_md5(tmp_path):
    # Valid IDX files with the right shapes but other contents: the MD5 check is what
    # stops them (this runs without the real data).
    dest = tmp_path / "mnist"
    dest.mkdir()
    shapes = {
        "train-images-idx3-ubyte": (60000, 28, 28),
        "train-labels-idx1-ubyte": (60000,),
        "t10k-images-idx3-ubyte": (10000, 28, 28),
        "t10k-labels-idx1-ubyte": (10000,),
    }
    for stem, shape in shapes.items():
        (dest / f"{stem}.gz").write_bytes(
            gzip.compress(idx_bytes(np.zeros(shape, np.uint8)), compresslevel=1)
        )
    with pytest.raises(DataError, match="MD5 of the decompressed contents") as info:
        load_mnist(tmp_path, download=False)
    assert str((dest / "train-images-idx3-ubyte.gz").resolve()) in str(info.value)


# --------------------------------------------------------------------------- CIFAR-10 subset


def test_cifar10_subset_npz_is_used_and_recorded_in_source(cifar10_dir):
    ds = load_cifar10(cifar10_dir, download=False)
    assert ds.name == "cifar10"
    assert ds.x_train.shape == (10000, 32, 32, 3) and ds.x_test.shape == (2000, 32, 32, 3)
    assert ds.x_train.dtype == np.uint8 and ds.y_train.dtype == np.int64
    assert np.array_equal(np.bincount(ds.y_train), [1000] * 10)
    assert "cifar10_subset.npz" in ds.source and "standing in" in ds.source


# --------------------------------------------------------------------------- CIFAR official layout


def test_cifar10_official_pickles_parse_to_hwc_images_and_labels(tmp_path):
    root = tmp_path / "cifar10"
    train_data, train_labels, test_data, test_labels = write_cifar10_folder(root)
    ds = load_cifar10(tmp_path, download=False)
    assert ds.x_train.shape == (100, 32, 32, 3) and ds.x_test.shape == (20, 32, 32, 3)
    assert np.array_equal(ds.y_train, train_labels) and np.array_equal(ds.y_test, test_labels)
    assert ds.y_train.dtype == np.int64
    # Official row layout: R plane, then G, then B, each 32x32 row-major.
    i, r, c = 37, 5, 17
    for ch in range(3):
        assert ds.x_train[i, r, c, ch] == train_data[i, ch * 1024 + r * 32 + c]
    assert ds.x_test[3, 31, 0, 2] == test_data[3, 2 * 1024 + 31 * 32 + 0]
    assert "official CIFAR-10 python pickles" in ds.source


def test_cifar100_official_pickles_use_fine_labels(tmp_path):
    train_data, train_fine, test_data, test_fine = write_cifar100_folder(tmp_path / "cifar100")
    ds = load_cifar100(tmp_path, download=False)
    assert ds.name == "cifar100"
    assert np.array_equal(ds.y_train, train_fine) and np.array_equal(ds.y_test, test_fine)
    assert ds.y_train.max() >= 20  # coarse labels stop at 19
    assert ds.x_train[4, 2, 30, 1] == train_data[4, 1024 + 2 * 32 + 30]
    assert ds.x_test.shape == (30, 32, 32, 3)


def test_cifar10_archive_is_checked_and_extracted(tmp_path, monkeypatch):
    staging = tmp_path / "staging"
    train_data, _, _, _ = write_cifar10_folder(staging)
    root = tmp_path / "data" / "cifar10"
    root.mkdir(parents=True)
    md5 = make_tar_gz(staging / "cifar-10-batches-py", root / "cifar-10-python.tar.gz")
    patch_cifar_md5(monkeypatch, "cifar10", md5)
    ds = load_cifar10(tmp_path / "data", download=False)
    assert (root / "cifar-10-batches-py" / "data_batch_5").is_file()
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == []  # no temp left
    assert ds.x_train[0, 0, 0, 0] == train_data[0, 0]


def test_cifar_archive_with_wrong_md5_is_rejected_naming_it(tmp_path):
    staging = tmp_path / "staging"
    write_cifar10_folder(staging)
    root = tmp_path / "data" / "cifar10"
    root.mkdir(parents=True)
    archive = root / "cifar-10-python.tar.gz"
    make_tar_gz(staging / "cifar-10-batches-py", archive)  # not the official md5
    with pytest.raises(DataError, match="c58f30108f718f92721af3b95e74349a") as info:
        load_cifar10(tmp_path / "data", download=False)
    assert str(archive.resolve()) in str(info.value)
    assert not (root / "cifar-10-batches-py").exists()


def test_cifar100_download_fetches_official_archive_then_extracts(tmp_path, monkeypatch):
    staging = tmp_path / "staging"
    _, train_fine, _, _ = write_cifar100_folder(staging)
    archive = tmp_path / "cifar-100-python.tar.gz"
    md5 = make_tar_gz(staging / "cifar-100-python", archive)
    patch_cifar_md5(monkeypatch, "cifar100", md5)
    calls = []

    def fake_download(url, expected_md5, dest_dir):
        calls.append((url, expected_md5))
        return Path(shutil.copy(archive, Path(dest_dir) / archive.name))

    monkeypatch.setattr(download_module, "_download", fake_download)
    ds = load_cifar100(tmp_path / "data", download=True)
    assert calls == [("https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz", md5)]
    assert np.array_equal(ds.y_train, train_fine)


def test_cifar10_download_failure_names_file_directory_and_url(tmp_path, monkeypatch):
    def offline(url, md5, dest_dir):
        raise OSError("network unreachable")

    monkeypatch.setattr(download_module, "_download", offline)
    with pytest.raises(DataError) as info:
        load_cifar10(tmp_path, download=True)
    message = str(info.value)
    assert f"cifar-10-python.tar.gz is missing from {(tmp_path / 'cifar10').resolve()}" in message
    assert "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz" in message
    assert "yourself" in message


def test_cifar10_missing_without_download_says_where_to_put_it(tmp_path):
    with pytest.raises(DataError) as info:
        load_cifar10(tmp_path, download=False)
    message = str(info.value)
    assert str((tmp_path / "cifar10" / "cifar-10-python.tar.gz").resolve()) in message
    assert "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz" in message


def test_cifar10_several_npz_files_are_an_error_listing_them(tmp_path):
    root = tmp_path / "cifar10"
    root.mkdir()
    write_npz(root / "a.npz")
    write_npz(root / "b.npz")
    with pytest.raises(DataError, match=r"a\.npz, b\.npz"):
        load_cifar10(tmp_path, download=False)


def test_cifar10_npz_with_wrong_image_shape_is_rejected(tmp_path):
    root = tmp_path / "cifar10"
    root.mkdir()
    write_npz(root / "small.npz")  # 8x8 images
    with pytest.raises(DataError, match=r"small\.npz.*\(N, 32, 32, 3\)"):
        load_cifar10(tmp_path, download=False)


def test_cifar_truncated_pickle_raises_data_error_naming_it(tmp_path):
    write_cifar10_folder(tmp_path / "cifar10")
    target = tmp_path / "cifar10" / "cifar-10-batches-py" / "data_batch_3"
    target.write_bytes(target.read_bytes()[:1000])
    with pytest.raises(DataError) as info:
        load_cifar10(tmp_path, download=False)
    assert str(target.resolve()) in str(info.value)


def test_cifar_incomplete_folder_names_the_missing_batch(tmp_path):
    write_cifar10_folder(tmp_path / "cifar10")
    target = tmp_path / "cifar10" / "cifar-10-batches-py" / "data_batch_4"
    target.unlink()
    with pytest.raises(DataError, match="incomplete") as info:
        load_cifar10(tmp_path, download=False)
    assert str(target.resolve()) in str(info.value)


def test_cifar_pickle_that_would_run_code_is_refused(tmp_path):
    write_cifar10_folder(tmp_path / "cifar10")
    target = tmp_path / "cifar10" / "cifar-10-batches-py" / "test_batch"
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    target.write_bytes(pickle.dumps({b"data": Evil(), b"labels": []}, protocol=2))
    with pytest.raises(DataError, match="refusing to load global") as info:
        load_cifar10(tmp_path, download=False)
    assert str(target.resolve()) in str(info.value)
    assert not marker.exists()


def test_cifar_pickle_with_str_keys_from_python2_is_accepted(tmp_path):
    # Python 2 files read with encoding="latin1" give str keys; check that path too.
    _, _, _, _ = write_cifar10_folder(tmp_path / "cifar10")
    target = tmp_path / "cifar10" / "cifar-10-batches-py" / "test_batch"
    data = cifar_images(20, seed=5)
    target.write_bytes(pickle.dumps({"data": data, "labels": [3] * 20}, protocol=2))
    ds = load_cifar10(tmp_path, download=False)
    assert np.array_equal(ds.y_test, [3] * 20)


# --------------------------------------------------------------------------- ImageNet-32


@pytest.fixture
def imagenet_dir(tmp_path) -> Path:
    classes = tmp_path / "imagenet32" / "classes"
    classes.mkdir(parents=True)
    for c in range(4):
        np.save(classes / f"{c}.npy", np.full((700, 32, 32, 3), c * 10, dtype=np.uint8))
    return tmp_path


def test_imagenet32_class_path_follows_dohare_layout(tmp_path):
    expected = (tmp_path / "imagenet32" / "classes" / "7.npy").resolve()
    assert imagenet32_class_path(tmp_path, 7) == expected
    assert imagenet32_class_path(tmp_path, np.int64(7)) == expected


def test_imagenet32_loads_class_files_and_counts_them(imagenet_dir):
    assert imagenet32_num_classes(imagenet_dir) == 4
    images = load_imagenet32_class(imagenet_dir, 2)
    assert images.shape == (700, 32, 32, 3) and images.dtype == np.uint8
    assert np.all(images == 20)
    assert not images.flags.writeable


def test_imagenet32_channels_first_file_is_returned_channels_last(imagenet_dir):
    chw = np.random.default_rng(0).integers(0, 256, (700, 3, 32, 32), dtype=np.uint8)
    np.save(imagenet32_class_path(imagenet_dir, 1), chw)
    images = load_imagenet32_class(imagenet_dir, 1)
    assert images.shape == (700, 32, 32, 3)
    assert images[10, 4, 5, 2] == chw[10, 2, 4, 5]


def test_imagenet32_bad_shape_names_file_and_expected_shape(imagenet_dir):
    path = imagenet32_class_path(imagenet_dir, 3)
    np.save(path, np.zeros((600, 32, 32, 3), np.uint8))
    with pytest.raises(DataError) as info:
        load_imagenet32_class(imagenet_dir, 3)
    message = str(info.value)
    assert str(path) in message and "(700, 32, 32, 3)" in message and "(600, 32, 32, 3)" in message


def test_imagenet32_non_pixel_values_are_rejected(imagenet_dir):
    path = imagenet32_class_path(imagenet_dir, 0)
    np.save(path, np.full((700, 32, 32, 3), 0.5, np.float32))
    with pytest.raises(DataError, match="not whole numbers in 0..255"):
        load_imagenet32_class(imagenet_dir, 0)
    np.save(path, np.full((700, 32, 32, 3), 17.0, np.float32))  # lossless: accepted
    assert load_imagenet32_class(imagenet_dir, 0).dtype == np.uint8


def test_imagenet32_missing_class_says_where_to_get_and_put_it(imagenet_dir):
    with pytest.raises(DataError) as info:
        load_imagenet32_class(imagenet_dir, 9)
    message = str(info.value)
    assert str(imagenet32_class_path(imagenet_dir, 9)) in message
    assert "github.com/shibhansh/loss-of-plasticity" in message
    assert "32x32" in message and "cannot be downloaded" in message


def test_imagenet32_num_classes_errors_when_none_or_with_gap(tmp_path, imagenet_dir):
    with pytest.raises(DataError, match="No ImageNet-32 class files") as info:
        imagenet32_num_classes(tmp_path / "empty")
    assert "loss-of-plasticity" in str(info.value)
    imagenet32_class_path(imagenet_dir, 1).unlink()
    with pytest.raises(DataError, match=r"1\.npy is missing"):
        imagenet32_num_classes(imagenet_dir)


def test_imagenet32_truncated_file_raises_data_error(imagenet_dir):
    path = imagenet32_class_path(imagenet_dir, 2)
    path.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(DataError, match="truncated") as info:
        load_imagenet32_class(imagenet_dir, 2)
    assert str(path) in str(info.value)


# --------------------------------------------------------------------------- user .npz


def test_load_npz_reads_valid_file_with_int64_labels(tmp_path):
    write_npz(tmp_path / "mine.npz")
    ds = load_npz(tmp_path / "mine.npz")
    assert isinstance(ds, ImageDataset)
    assert ds.name == "mine" and ds.source == str((tmp_path / "mine.npz").resolve())
    assert ds.x_train.shape == (12, 8, 8, 3) and ds.y_test.dtype == np.int64
    assert ds.num_classes == 4
    assert not ds.x_train.flags.writeable


def test_load_npz_missing_key_is_named(tmp_path):
    write_npz(tmp_path / "d.npz", y_test=None)
    with pytest.raises(DataError, match=r"d\.npz: missing array\(s\) y_test"):
        load_npz(tmp_path / "d.npz")


def test_load_npz_wrong_image_dtype_is_rejected(tmp_path):
    write_npz(tmp_path / "d.npz", x_train=np.zeros((12, 8, 8, 3), np.float32))
    with pytest.raises(DataError, match=r"x_train has dtype float32.*uint8"):
        load_npz(tmp_path / "d.npz")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"y_train": np.arange(12) - 1}, "negative label -1"),
        ({"y_train": np.arange(11)}, "one label per image"),
        ({"y_test": np.zeros(4, np.float64)}, "labels must be integers"),
        ({"x_test": np.zeros((4, 9, 9, 3), np.uint8)}, "same image shape"),
        ({"x_train": np.zeros((12, 3, 8, 8), np.uint8)}, "channels-first"),
        ({"x_train": np.zeros((12, 64), np.uint8)}, r"must be \(N, H, W\)"),
    ],
)
def test_load_npz_rejects_invalid_arrays(tmp_path, overrides, message):
    write_npz(tmp_path / "d.npz", **overrides)
    with pytest.raises(DataError, match=message):
        load_npz(tmp_path / "d.npz")


def test_load_npz_missing_or_corrupt_file_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        load_npz(tmp_path / "absent.npz")
    write_npz(tmp_path / "d.npz")
    raw = (tmp_path / "d.npz").read_bytes()
    (tmp_path / "d.npz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DataError, match="truncated") as info:
        load_npz(tmp_path / "d.npz")
    assert str(tmp_path / "d.npz") in str(info.value)


def test_load_npz_refuses_object_arrays(tmp_path):
    buffer = io.BytesIO()
    np.savez(
        buffer,
        x_train=np.array([object()]),
        y_train=np.zeros(1),
        x_test=np.zeros(1),
        y_test=np.zeros(1),
    )
    (tmp_path / "evil.npz").write_bytes(buffer.getvalue())
    with pytest.raises(DataError, match="evil.npz"):
        load_npz(tmp_path / "evil.npz")


def test_image_dataset_repr_is_short():
    ds = ImageDataset(
        "x",
        np.zeros((2, 3, 3), np.uint8),
        np.zeros(2, np.int64),
        np.zeros((1, 3, 3), np.uint8),
        np.zeros(1, np.int64),
        "here",
    )
    assert repr(ds) == "ImageDataset(name='x', train=(2, 3, 3), test=(1, 3, 3), source='here')"


# --------------------------------------------------------------------------- fetched once, first


def test_fetch_datasets_downloads_what_is_missing_once_and_reads_no_images(
        real_mnist_dir, tmp_path, monkeypatch):
    staging = tmp_path / "staging"
    write_cifar10_folder(staging)
    archive = tmp_path / "cifar-10-python.tar.gz"
    patch_cifar_md5(monkeypatch, "cifar10", make_tar_gz(staging / "cifar-10-batches-py", archive))
    calls = []

    def fake_download(url, md5, dest_dir):
        calls.append(url.rsplit("/", 1)[-1])
        source = archive if url.endswith(".tar.gz") else real_mnist_dir / calls[-1]
        return Path(shutil.copy(source, Path(dest_dir) / calls[-1]))

    monkeypatch.setattr(download_module, "_download", fake_download)
    read = []
    monkeypatch.setattr(cifar_module, "_from_folder", lambda *a: read.append(a))
    data = tmp_path / "data"
    fetch_datasets(["mnist", None, "cifar10", "mnist"], data)
    assert sorted(calls) == sorted([f"{stem}.gz" for stem in MNIST_STEMS] + ["cifar-10-python.tar.gz"])
    assert (data / "cifar10" / "cifar-10-batches-py" / "data_batch_1").is_file()  # extracted
    assert read == []
    fetch_datasets(["mnist", "cifar10"], data)  # all there: nothing more to fetch
    assert len(calls) == 5
    with pytest.raises(ValueError, match="unknown dataset 'svhn'; valid: mnist, cifar10"):
        fetch_datasets(["svhn"], data)


def test_fetch_datasets_takes_a_cifar_npz_as_it_is_and_imagenet32_is_never_downloaded(
        cifar10_dir, imagenet_dir, tmp_path_factory):
    # (a download would fail: no_network)
    fetch_datasets(["cifar10"], cifar10_dir)  # the subset's .npz
    fetch_datasets(["imagenet32"], imagenet_dir)
    with pytest.raises(DataError, match="No ImageNet-32 class files"):
        fetch_datasets(["imagenet32"], tmp_path_factory.mktemp("empty"))


@pytest.mark.parametrize("problem", sorted(PROBLEMS))
def test_each_problem_declares_the_dataset_it_reads(problem, tmp_path, monkeypatch):
    # what a sweep's driver fetches for the workers (Problem.dataset) is what the problem loads:
    # built on an empty data directory, offline, it asks for that dataset's folder alone
    asked = []

    def offline(url, md5, dest_dir):
        asked.append(Path(dest_dir).name)
        raise ConnectionError("offline")

    monkeypatch.setattr(download_module, "_download", offline)
    cls = PROBLEMS[problem]
    assert cls.dataset is None or cls.dataset in FETCHERS
    try:
        cls([0], tasks=1, steps_per_task=1, data_dir=tmp_path)
    except DataError as e:
        asked = asked or ["imagenet32"] * ("imagenet32" in str(e))
    assert asked[:1] == ([cls.dataset] if cls.dataset else [])
