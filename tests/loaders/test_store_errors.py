"""Every failure while reading or writing a store is an error naming the file (or the sample) and
what is wrong: a StoreError (a ValueError) from open_store, a ValueError/TypeError from pack, an
OSError naming the file for what the system refuses — never a RecursionError, an EOFError, an
OverflowError or an AttributeError from deep inside numpy or json. The header is fuzzed key by key
(its checksum recomputed, so that each value reaches the check of its own), the tables with
wrong contents, and pack with labels and fields out of range."""
import io
import json
import os
import zipfile
import zlib

import numpy as np
import pytest

import prefetch
from prefetch.store import StoreError

from ..helpers import run_child
from .test_store import jpeg

FILES = [jpeg(6 + k, 9, seed=k) for k in range(4)]


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "good"
    prefetch.pack([(d, k, {"weight": np.float32(k) / 2}) for k, d in enumerate(FILES)], path,
                  progress=False)
    return path


def copy_of(good, tmp_path, name="copy"):
    import shutil

    return shutil.copytree(good, tmp_path / name)


def write_header(path, header, fix_checksum=True):
    if fix_checksum:
        header = {k: v for k, v in header.items() if k != "header_crc32"}
        header["header_crc32"] = prefetch.store.header_crc32(header)
    (path / "header.json").write_text(json.dumps(header))


def opened_or_refused(path):
    """open_store's outcome: the Store, or its StoreError (anything else fails the test)."""
    try:
        return prefetch.open_store(path)
    except StoreError as e:
        assert str(path) in str(e), e
        return e


def holds_the_files(store):
    return [bytes(store[i][0].numpy()) for i in range(len(store))] == FILES


# Values put at each key of the header: wrong types, out of range, huge, NaN, unicode.
BAD_VALUES = [None, True, -1, 0, 2 ** 70, -(2 ** 70), 1.5, float("nan"), float("inf"), "",
              "ünïcødé \u2603", "\ud800", [], [1, "a"], {}, {"a": [None]}]


def header_paths(header):
    """Every key path of the header (nested dicts and lists), to put a bad value at."""
    out = []

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                out.append(path + (k,))
                walk(v, path + (k,))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                out.append(path + (i,))
                walk(v, path + (i,))

    walk(header, ())
    return [p for p in out if p != ("header_crc32",)]


def test_every_header_value_of_a_wrong_type_or_range_is_a_store_error(good, tmp_path):
    """The fuzz: each key path x each bad value, checksum recomputed. The store either opens and
    holds the files as they were (a key that does not matter: created_by, skipped) or raises a
    StoreError naming the store; nothing else escapes."""
    header = json.loads((good / "header.json").read_text())
    path = copy_of(good, tmp_path)
    outcomes = {}
    for key_path in header_paths(header):
        for bad in BAD_VALUES:
            edited = json.loads(json.dumps(header))
            node = edited
            for k in key_path[:-1]:
                node = node[k]
            node[key_path[-1]] = bad
            write_header(path, edited)
            got = opened_or_refused(path)
            if not isinstance(got, StoreError):
                assert holds_the_files(got), (key_path, bad)
            outcomes[(key_path, repr(bad))] = type(got).__name__
    # The keys the reader relies on refuse every bad value (checksum recomputed or not).
    for key in (("format",), ("version",), ("count",), ("files",), ("encoding",), ("byteorder",)):
        assert all(outcomes[(key, repr(bad))] == "StoreError" for bad in BAD_VALUES), key
    assert outcomes[(("created_by",), repr(None))] == "Store"


@pytest.mark.parametrize("text,what", [
    ("[" * 100000 + "]" * 100000, "nests its values deeper"),
    ('{"a":' * 100000 + "1" + "}" * 100000, "nests its values deeper"),
    ("[" * 100000, "nests its values deeper|not valid JSON"),
    ("{" + '"x": 1,' * 10 + "}", "not valid JSON"),
    ("\xff\xfe", "not valid JSON"),
    ('{"format": "prefetch-store", "version": 1e400}', "version inf"),
    ('{"format": "prefetch-store", "version": NaN}', "version nan"),
    ('{"format": "prefetch-store", "version": ' + "9" * 5000 + "}", "not valid JSON"),
    ("", "not valid JSON"),
    ("[]", "format 'list'"),
], ids=["lists-100000-deep", "objects-100000-deep", "unclosed-100000-deep", "trailing-comma",
        "not-utf8", "version-1e400", "version-NaN", "version-5000-digits", "empty", "a-list"])
def test_a_header_that_is_not_a_store_header_is_a_store_error(good, tmp_path, text, what):
    path = copy_of(good, tmp_path)
    (path / "header.json").write_bytes(text.encode("utf-8", "surrogateescape")
                                       if text != "\xff\xfe" else b"\xff\xfe")
    with pytest.raises(StoreError, match=what) as info:
        prefetch.open_store(path)
    assert "header.json" in str(info.value) and str(path) in str(info.value)


def test_a_header_nested_just_below_the_parser_limit_is_a_store_error(good, tmp_path):
    """Nesting json.loads may accept but the checksum's json.dumps may not: a StoreError (the
    checksum's, or the nesting's), never a RecursionError."""
    path = copy_of(good, tmp_path)
    text = (good / "header.json").read_text()
    assert '"created_by": "prefetch ' in text
    for depth in (400, 900, 990, 5000):
        nested = text.replace('"created_by": "prefetch ', '"created_by": %s, "was": "'
                              % ("[" * depth + "]" * depth))
        (path / "header.json").write_text(nested)
        assert isinstance(opened_or_refused(path), StoreError), depth


@pytest.mark.parametrize("name", ["values\x00.bin", "\ud800.npy", "../offsets.npy", "a/b.npy", ".",
                                  "", "x" * 5000])
def test_a_file_name_in_the_header_that_names_no_file_of_the_store_is_refused(good, tmp_path, name):
    path = copy_of(good, tmp_path)
    header = json.loads((good / "header.json").read_text())
    header["files"]["offsets"]["file"] = name
    write_header(path, header)
    with pytest.raises(StoreError) as info:
        prefetch.open_store(path)
    assert str(path) in str(info.value)


def npy_bytes(array):
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


def zip_bytes():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("offsets.npy", npy_bytes(np.zeros(5, np.int64)))
    return out.getvalue()


def object_npy():
    out = io.BytesIO()
    np.save(out, np.array([1, None], dtype=object), allow_pickle=True)
    return out.getvalue()


TABLES = {
    # name -> (table, bytes written in its place, what the error says)
    "empty": ("offsets", b"", "not a readable .npy file"),
    "truncated": ("offsets", npy_bytes(np.arange(5, dtype=np.int64))[:-9], "not a readable .npy"),
    "header only": ("sizes", npy_bytes(np.zeros((4, 3), np.int64))[:128], "not a readable .npy"),
    "a zip (npz)": ("offsets", zip_bytes(), "not a readable .npy file"),
    "pickled objects": ("labels", object_npy(), "not a readable .npy file"),
    "big-endian offsets": ("offsets", npy_bytes(np.arange(5, dtype=">i8")), "holds >i8"),
    "int32 labels": ("labels", npy_bytes(np.arange(4, dtype=np.int32)), "holds <i4"),
    "wrong shape": ("sizes", npy_bytes(np.zeros((4, 2), np.int64)), r"holds <i8 \[4, 2\]"),
    "datetime field": ("weight", npy_bytes(np.zeros(4, "M8[s]")), "no torch dtype|holds <M8"),
    "text": ("offsets", b"not a numpy file at all", "not a readable .npy file"),
}


@pytest.mark.parametrize("case", sorted(TABLES))
def test_a_table_with_wrong_contents_is_a_store_error_naming_it(good, tmp_path, case):
    """The table's bytes replaced, and its entry (size, checksum) updated to match, so that only
    the reading of the table itself can refuse it; and once more with the header also saying the
    table's new dtype and shape."""
    name, data, what = TABLES[case]
    path = copy_of(good, tmp_path)
    header = json.loads((good / "header.json").read_text())
    file = header["files"][name]["file"]
    (path / file).write_bytes(data)
    header["files"][name].update(bytes=len(data), crc32=zlib.crc32(data))
    write_header(path, header)
    with pytest.raises(StoreError, match=what) as info:
        prefetch.open_store(path)
    assert file in str(info.value) and str(path) in str(info.value)
    try:
        array = np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
    except Exception:  # noqa: BLE001 - not a .npy: the header cannot say what it holds
        return
    header["files"][name].update(dtype=array.dtype.str, shape=list(array.shape))
    write_header(path, header)
    with pytest.raises(StoreError) as info:
        prefetch.open_store(path)
    assert file in str(info.value)


# -- writing ---------------------------------------------------------------------------------------

LABELS = [2 ** 63, -(2 ** 63) - 1, 2 ** 64, 2 ** 70, -(2 ** 100), np.uint64(2 ** 63), 2 ** 20000]


@pytest.mark.parametrize("label", LABELS, ids=["2**63", "-2**63-1", "2**64", "2**70", "-2**100",
                                               "uint64(2**63)", "2**20000"])
@pytest.mark.parametrize("source", ["paths", "iterable"])
def test_a_label_beyond_int64_is_a_value_error_naming_the_sample(tmp_path, label, source):
    """Labels are int64: one beyond is refused naming the sample and the value (an int too long
    to print names its size), where numpy raised a bare OverflowError."""
    if source == "paths":
        paths = []
        for k, data in enumerate(FILES[:2]):
            paths.append(str(tmp_path / ("%d.jpg" % k)))
            with open(paths[-1], "wb") as f:
                f.write(data)
        call = lambda: prefetch.pack(paths, tmp_path / "s", labels=[0, label], progress=False)  # noqa: E731
        name = paths[1]
    else:
        call = lambda: prefetch.pack([(FILES[0], 0), (FILES[1], label)], tmp_path / "s",  # noqa: E731
                                     progress=False)
        name = "sample 1"
    with pytest.raises(ValueError, match="beyond int64") as info:
        call()
    shown = "%d" % int(label) if int(label).bit_length() <= 256 else "bits"
    assert name in str(info.value) and "label" in str(info.value) and shown in str(info.value)
    assert not os.path.exists(tmp_path / "s")
    # A label that is no int (a float, even a whole one; a bool) is a TypeError naming it.
    for not_int in (1.5, 2.0, np.float64(1.0), True):
        with pytest.raises(TypeError, match="the label of sample 1 is .*expected an int"):
            prefetch.pack([(FILES[0], 0), (FILES[1], not_int)], tmp_path / "t", progress=False)
    # In range, the same labels pack and read back exactly (an int64 table).
    store = prefetch.pack([(FILES[0], 2 ** 63 - 1), (FILES[1], -(2 ** 63))], tmp_path / "ok",
                          progress=False)
    assert store.labels.tolist() == [2 ** 63 - 1, -(2 ** 63)]


@pytest.mark.parametrize("value,error,what", [
    (2 ** 64, ValueError, "holds the int 18446744073709551616, beyond both int64 and uint64"),
    (-(2 ** 63) - 1, ValueError, "beyond both int64 and uint64"),
    ([1, 2 ** 80], ValueError, "beyond both int64 and uint64"),
    (np.longdouble(1.5), TypeError, "has dtype float128, which has no torch dtype"),
    (np.array(["a"]), TypeError, "fields are numbers or numeric arrays"),
    (np.datetime64(1, "s"), TypeError, "fields are numbers or numeric arrays"),
])
def test_a_field_no_tensor_can_hold_is_refused_naming_it(tmp_path, value, error, what):
    """A field's values become a table the reader hands to torch: a value no table or no tensor
    holds is refused when packed, naming the field and the sample — not written into a store
    that open_store would then refuse."""
    if isinstance(value, np.longdouble) and np.dtype(np.longdouble).itemsize == 8:
        pytest.skip("np.longdouble is float64 on this platform")
    with pytest.raises(error, match=what) as info:
        prefetch.pack([(FILES[0], {"x": value}), (FILES[1], {"x": value})], tmp_path / "s",
                      progress=False)
    assert "'x'" in str(info.value) and "sample 0" in str(info.value)
    assert not os.path.exists(tmp_path / "s")


def test_a_write_the_system_refuses_names_the_file_and_leaves_nothing(tmp_path):
    """A file size limit (RLIMIT_FSIZE, as a full disk would) hit while writing values.bin:
    an OSError of the system's errno naming the file, dest left absent, the partial directory
    removed (in a child: the limit is process-wide)."""
    out = run_child("""
        import errno, io, os, resource, signal
        import numpy as np
        from PIL import Image
        import prefetch
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead
        rng = np.random.default_rng(0)
        data = []
        for _ in range(4):  # noise: ~150 kB each
            out = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, (256, 256, 3), dtype=np.uint8)).save(
                out, "JPEG", quality=95)
            data.append(out.getvalue())
        assert sum(map(len, data)) > 300000, [len(d) for d in data]
        resource.setrlimit(resource.RLIMIT_FSIZE, (200000, resource.RLIM_INFINITY))
        dest = os.path.join(%r, "s")
        try:
            prefetch.pack(data, dest, chunk=1, progress=False)
        except OSError as e:
            print("errno", e.errno == errno.EFBIG, "|", e)
        print("left", sorted(os.listdir(%r)))
        print("done")
    """ % (str(tmp_path), str(tmp_path)), timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "errno True" in out.stdout, out.stdout
    assert "values.bin" in out.stdout and "File too large" in out.stdout, out.stdout
    assert "left []" in out.stdout, out.stdout
