"""Stores (prefetch.pack, prefetch.open_store) against independent references: each sample's
bytes against the file read with open(), labels against the class folders' order written out
here, sizes against PIL's, the numpy-only reader that docs/arrays.md shows (run from the doc
itself), a store kept in the repository (the format on disk, pinned), refusals by name, an
interrupted pack, corrupt copies, and the command line."""
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch

import prefetch
from prefetch.store import StoreError

from ..helpers import ROOT

Image = pytest.importorskip("PIL.Image")

FIXTURE = os.path.join(ROOT, "tests", "data", "store_v1")


def jpeg(h, w, seed, mode="RGB", quality=75):
    """The bytes of an h x w JPEG of noise (a grayscale one with mode="L")."""
    rng = np.random.default_rng(seed)
    shape = (h, w, 3) if mode == "RGB" else (h, w)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(out, "JPEG", quality=quality)
    return out.getvalue()


def png(h=5, w=7):
    out = io.BytesIO()
    Image.new("RGB", (w, h), (10, 20, 30)).save(out, "PNG")
    return out.getvalue()


# The folder test_a_folder_... packs, in the order ImageFolder takes it: classes sorted, files
# sorted within each folder, a class's own files before its subfolder's. (relative path, label)
TREE = [("ant/a0.jpg", 0), ("ant/a1.JPEG", 0), ("ant/a3.jpeg", 0), ("ant/sub/a2.jpg", 0),
        ("bee/b0.jpg", 1), ("bee/b1.jpg", 1), ("bee/b2.jpg", 1), ("bee/b3.jpg", 1),
        ("cow/c0.jpg", 2), ("cow/c1.jpg", 2), ("cow/c2.jpg", 2), ("cow/d/c3.jpg", 2)]


def write_tree(root):
    """TREE's files (12 JPEGs of different sizes, two of them grayscale) and files that are not
    taken (a text file, a PNG named .png). Returns the JPEGs' paths in TREE's order."""
    paths = []
    for k, (rel, _) in enumerate(TREE):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(jpeg(5 + 3 * k, 17 - k, seed=k, mode="L" if k in (2, 9) else "RGB"))
        paths.append(str(path))
    (root / "ant" / "notes.txt").write_text("not an image")
    (root / "cow" / "d" / "pic.png").write_bytes(png())
    return paths


def pil_hwc(path_or_bytes):
    image = Image.open(path_or_bytes if isinstance(path_or_bytes, str) else io.BytesIO(path_or_bytes))
    width, height = image.size
    return [height, width, 3]


def read(path):
    with open(path, "rb") as f:
        return f.read()


def check_store_holds(store, files, labels):
    """``store`` holds ``files`` (bytes), in order, with ``labels`` (or None)."""
    assert len(store) == store.count == len(files)
    for i, data in enumerate(files):
        sample, label = store[i]
        assert sample.dtype == torch.uint8 and sample.dim() == 1
        assert bytes(sample.numpy()) == data, "sample %d" % i
        assert bytes(store.images[i].numpy()) == data, "images[%d]" % i
        assert label == (None if labels is None else labels[i])
    assert store.image_sizes.tolist() == [pil_hwc(d) for d in files]
    assert (store.labels is None) == (labels is None)
    if labels is not None:
        assert store.labels.dtype == torch.int64 and store.labels.tolist() == list(labels)
    assert store.offsets.tolist() == np.concatenate([[0], np.cumsum([len(d) for d in files])]).tolist()


def test_a_folder_packs_into_its_files_bytes_labels_and_sizes(tmp_path):
    paths = write_tree(tmp_path / "src")
    store = prefetch.pack(tmp_path / "src", tmp_path / "train.store", progress=False)
    assert store.classes == ["ant", "bee", "cow"]
    check_store_holds(store, [read(p) for p in paths], [label for _, label in TREE])
    assert sorted(os.path.relpath(p, tmp_path / "src") for p in store.ignored) == [
        "ant/notes.txt", "cow/d/pic.png"]
    assert store.skipped == []
    assert store.header["count"] == 12 and store.header["skipped"] == 0
    assert list(store.header["files"]) == ["values", "offsets", "sizes", "labels"]
    assert store.fields == {}
    images, labels = store.as_arrays()
    assert isinstance(images, prefetch.Ragged) and len(images) == 12
    assert images.values.data_ptr() == store.values.data_ptr()  # the mapping, not a copy
    assert labels is store.labels
    assert "12 JPEGs" in repr(store) and "3 classes" in repr(store)
    # Opened again, the same; the images decode to PIL's pixels.
    again = prefetch.open_store(tmp_path / "train.store", verify=True)
    check_store_holds(again, [read(p) for p in paths], [label for _, label in TREE])
    assert again.skipped is None
    if prefetch.built_with_jpeg():
        decoded = prefetch.ops.decode_jpeg(again.images[:3])
        for k in range(3):
            expected = np.asarray(Image.open(paths[k]).convert("RGB"))
            assert torch.equal(decoded[k], torch.from_numpy(expected))
    # Indexing as a sequence does.
    assert bytes(store[-1][0].numpy()) == read(paths[-1])
    with pytest.raises(IndexError, match="sample 12 of a store of 12"):
        store[12]
    with pytest.raises(TypeError):
        store["0"]


def test_a_folder_of_jpegs_without_class_folders_has_no_labels(tmp_path):
    src = tmp_path / "flat"
    src.mkdir()
    files = [jpeg(8 + k, 9, seed=k) for k in range(3)]
    for k, data in enumerate(files):
        (src / ("%d.jpg" % k)).write_bytes(data)
    store = prefetch.pack(str(src), str(tmp_path / "s"), progress=False)
    assert store.classes is None and store.header["classes"] is None
    check_store_holds(store, files, None)
    assert len(store.as_arrays()) == 1
    # A store written inside the folder is not taken for a class folder when packing again.
    prefetch.pack(src, src / "inside.store", progress=False)
    check_store_holds(prefetch.pack(src, src / "inside.store", overwrite=True, progress=False), files, None)
    shutil.rmtree(src / "inside.store")
    # JPEGs beside class folders would be left out by ImageFolder: refused, naming them.
    (src / "cls").mkdir()
    (src / "cls" / "x.jpg").write_bytes(files[0])
    with pytest.raises(ValueError, match=r"holds both JPEGs \(3, e.g. 0.jpg\) and subfolders \(cls\)"):
        prefetch.pack(src, tmp_path / "t", progress=False)
    # A class folder without a JPEG is refused (its label would be a class with no sample).
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    (tree / "b").mkdir()
    (tree / "a" / "x.jpg").write_bytes(files[0])
    (tree / "b" / "x.png").write_bytes(png())
    with pytest.raises(ValueError, match="class folders of .* hold no JPEG: b"):
        prefetch.pack(tree, tmp_path / "u", progress=False)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        prefetch.pack(tmp_path / "missing", tmp_path / "v", progress=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="holds no JPEG"):
        prefetch.pack(empty, tmp_path / "w", progress=False)
    assert sorted(os.listdir(tmp_path)) == ["empty", "flat", "s", "tree"]


def test_a_list_of_paths_with_labels_and_fields(tmp_path):
    files = [jpeg(6 + k, 11 - k, seed=k) for k in range(5)]
    paths = []
    for k, data in enumerate(files):
        paths.append(tmp_path / ("z%d.jpg" % (4 - k)))  # not in sorted order: the list's order is kept
        paths[-1].write_bytes(data)
    boxes = [np.arange(4, dtype=np.float32) + k for k in range(5)]
    store = prefetch.pack(paths, tmp_path / "s", labels=[3, 1, 4, 1, 5], fields={"box": boxes},
                          chunk=2, workers=2, progress=False)
    check_store_holds(store, files, [3, 1, 4, 1, 5])
    assert store.classes is None
    assert store.fields["box"].dtype == torch.float32 and store.fields["box"].shape == (5, 4)
    assert torch.equal(store.fields["box"], torch.from_numpy(np.stack(boxes)))
    images, labels, box = store.as_arrays()
    assert box is store.fields["box"]
    assert store.header["files"]["box"]["dtype"] == "<f4"
    with pytest.raises(ValueError, match="got 5 paths and 4 labels"):
        prefetch.pack(paths, tmp_path / "t", labels=[0] * 4, progress=False)
    with pytest.raises(ValueError, match="field 'box' has 3 values for 5 files"):
        prefetch.pack(paths, tmp_path / "t", fields={"box": boxes[:3]}, progress=False)
    with pytest.raises(ValueError, match="field 'box' of .*z1.jpg is float32 \\[3\\], expected float32 \\[4\\]"):
        prefetch.pack(paths, tmp_path / "t", fields={"box": boxes[:3] + [np.zeros(3, np.float32)] + boxes[4:]},
                      progress=False)
    assert not os.path.exists(tmp_path / "t")


def test_an_iterable_of_bytes_labels_and_fields(tmp_path):
    files = [jpeg(4 + k, 4 + 2 * k, seed=k) for k in range(7)]
    weights = [0.5 * k for k in range(7)]

    def samples():
        for k, data in enumerate(files):
            # bytes, bytearray, a numpy array and a tensor all carry the encoded bytes
            as_given = [data, bytearray(data), np.frombuffer(data, np.uint8),
                        torch.frombuffer(bytearray(data), dtype=torch.uint8)][k % 4]
            yield as_given, k % 2, {"weight": weights[k], "flag": np.bool_(k > 2)}

    store = prefetch.pack(samples(), tmp_path / "s", chunk=3, progress=False)
    check_store_holds(store, files, [k % 2 for k in range(7)])
    assert store.classes is None
    assert list(store.fields) == ["weight", "flag"]
    assert store.fields["weight"].dtype == torch.float64
    assert store.fields["weight"].tolist() == weights
    assert store.fields["flag"].tolist() == [k > 2 for k in range(7)]
    assert [t is f for t, f in zip(store.as_arrays()[2:], store.fields.values())] == [True, True]
    # Bytes alone: no labels, no fields.
    plain = prefetch.pack(iter(files), tmp_path / "p", progress=False)
    check_store_holds(plain, files, None)
    assert plain.fields == {} and len(plain.as_arrays()) == 1
    # (bytes, fields) without a label.
    only = prefetch.pack([(d, {"w": 1}) for d in files], tmp_path / "o", progress=False)
    assert only.labels is None and only.fields["w"].tolist() == [1] * 7
    # Samples that do not match the first one are refused, naming the sample and the field.
    cases = [
        ([(files[0], 0, {"weight": 1.0}), (files[1], 1, {"weight": 2})],
         r"field 'weight' of sample 1 is int64 \[\], expected float64 \[\]"),
        ([(files[0], 0), (files[1], 0), files[2]], "sample 2 has no label, and the samples before it have one"),
        ([(files[0], {"a": 1}), (files[1], {"b": 1})],
         r"sample 1 has the fields \['b'\], and the samples before it \['a'\]"),
        ([(files[0], 1.5)], "the label of sample 0 is 1.5, expected an int"),
        ([(files[0], {"labels": 1})], "field name 'labels'"),
        ([(files[0], {"s": "text"})], "field 's' of sample 0 is a str"),
        (iter(["a string"]), "sample 0 is a str, expected the encoded bytes"),
    ]
    for samples_, message in cases:
        with pytest.raises((ValueError, TypeError), match=message):
            prefetch.pack(samples_, tmp_path / "bad", progress=False)
        assert not os.path.exists(tmp_path / "bad")
    with pytest.raises(ValueError, match="labels= and fields= go with a directory or a list of paths"):
        prefetch.pack(iter(files), tmp_path / "bad", labels=[0] * 7)
    assert sorted(os.listdir(tmp_path)) == ["o", "p", "s"]


def docs_reader():
    """The numpy-only snippet of docs/arrays.md, between its store-reader markers."""
    text = open(os.path.join(ROOT, "docs", "arrays.md")).read()
    block = re.search(r"<!-- store-reader: begin -->\s*```python\n(.*?)```\s*<!-- store-reader: end -->",
                      text, re.S)
    assert block, "docs/arrays.md lost its store-reader snippet"
    return block.group(1)


def test_the_numpy_reader_in_docs_arrays_md_reads_the_files_bytes(tmp_path):
    paths = write_tree(tmp_path / "src")
    prefetch.pack(tmp_path / "src", tmp_path / "s", progress=False)
    code = compile(docs_reader(), "docs/arrays.md", "exec")
    for i, path in enumerate(paths):
        scope = {"path": str(tmp_path / "s"), "i": i}
        exec(code, scope)
        assert scope["jpeg"] == read(path)
        assert scope["sizes"][i].tolist() == pil_hwc(path)
        assert scope["labels"][i] == TREE[i][1]
    # It reads the store kept in the repository too (no prefetch involved).
    scope = {"path": FIXTURE, "i": 1}
    exec(code, scope)
    assert hashlib.sha256(scope["jpeg"]).hexdigest() == FIXTURE_SHA256[1]


def test_files_that_are_not_jpegs_are_refused_by_name(tmp_path):
    good = tmp_path / "good.jpg"
    good.write_bytes(jpeg(9, 9, seed=0))
    not_png = tmp_path / "image.png"
    not_png.write_bytes(png())
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(read(good)[:20])  # the start of a JPEG, before its frame header
    missing = tmp_path / "missing.jpg"
    expected = {str(not_png): r"not a JPEG \(starts with b'\\x89PNG\\r\\n\\x1a\\n'\)",
                str(text): r"not a JPEG \(starts with b'hello'\)",
                str(cut): r"not a readable JPEG \(",
                str(missing): r"cannot be read: No such file or directory"}
    for bad, message in expected.items():
        with pytest.raises(ValueError, match=re.escape(bad) + ": " + message):
            prefetch.pack([good, bad], tmp_path / "s", progress=False)
        assert not os.path.exists(tmp_path / "s")
    store = prefetch.pack([good, not_png, good, text, cut, missing], tmp_path / "s",
                          labels=[0, 1, 2, 3, 4, 5], on_error="skip", progress=False)
    check_store_holds(store, [read(good)] * 2, [0, 2])
    assert [name for name, _ in store.skipped] == [str(not_png), str(text), str(cut), str(missing)]
    assert "not a JPEG (starts with b'\\x89PNG" in store.skipped[0][1]
    assert store.header["skipped"] == 4 and prefetch.open_store(tmp_path / "s").header["skipped"] == 4
    # A PNG named .jpg in a folder, and a sample of an iterable, are named too.
    (tmp_path / "tree" / "a").mkdir(parents=True)
    (tmp_path / "tree" / "a" / "fake.jpg").write_bytes(png())
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "tree" / "a" / "fake.jpg")) + ": not a JPEG"):
        prefetch.pack(tmp_path / "tree", tmp_path / "t", progress=False)
    with pytest.raises(ValueError, match=r"sample 1: not a JPEG \(empty: 0 bytes\)"):
        prefetch.pack([read(good), b""], tmp_path / "t", progress=False)
    with pytest.raises(ValueError, match="no sample left to pack: all 2 were skipped"):
        prefetch.pack([not_png, text], tmp_path / "t", on_error="skip", progress=False)
    with pytest.raises(ValueError, match="the source yielded no sample"):
        prefetch.pack([], tmp_path / "t", progress=False)
    with pytest.raises(ValueError, match="the source yielded no sample"):
        prefetch.pack(iter([]), tmp_path / "t", progress=False)
    assert not os.path.exists(tmp_path / "t")
    assert not [n for n in os.listdir(tmp_path) if ".partial-" in n]


@pytest.mark.parametrize("stop", [RuntimeError, KeyboardInterrupt])
def test_an_interrupted_pack_leaves_nothing(tmp_path, stop):
    files = [jpeg(6, 6 + k, seed=k) for k in range(8)]

    def samples():
        for k, data in enumerate(files):
            if k == 5:
                raise stop("stopped halfway")
            yield data, k

    with pytest.raises(stop, match="stopped halfway"):
        prefetch.pack(samples(), tmp_path / "s", chunk=2, progress=False)  # two chunks written
    assert os.listdir(tmp_path) == []
    # Over an existing store (overwrite=True), the old one stays as it was.
    prefetch.pack(files[:2], tmp_path / "s", progress=False)
    with pytest.raises(stop):
        prefetch.pack(samples(), tmp_path / "s", chunk=2, overwrite=True, progress=False)
    assert os.listdir(tmp_path) == ["s"]
    check_store_holds(prefetch.open_store(tmp_path / "s", verify=True), files[:2], None)


def test_an_existing_dest_is_refused_unless_overwrite(tmp_path):
    files = [jpeg(7, 5 + k, seed=k) for k in range(4)]
    prefetch.pack(files[:3], tmp_path / "s", progress=False)
    with pytest.raises(FileExistsError, match=re.escape(str(tmp_path / "s")) + " exists; pass overwrite=True"):
        prefetch.pack(files, tmp_path / "s", progress=False)
    assert prefetch.open_store(tmp_path / "s").count == 3
    store = prefetch.pack(files, tmp_path / "s", overwrite=True, progress=False)
    check_store_holds(store, files, None)
    assert os.listdir(tmp_path) == ["s"]  # no partial or old directory left
    # A directory that is not a store is never deleted, even with overwrite=True; an empty one is.
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("precious")
    with pytest.raises(FileExistsError, match="is not a prefetch store"):
        prefetch.pack(files, tmp_path / "mine", overwrite=True, progress=False)
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "precious"
    (tmp_path / "empty").mkdir()
    prefetch.pack(files, tmp_path / "empty", overwrite=True, progress=False)
    assert prefetch.open_store(tmp_path / "empty").count == 4


def rewrite_header(path, **changes):
    """Edits header.json and recomputes its checksum (so that the check after it is reached)."""
    header = json.loads((path / "header.json").read_text())
    header.update(changes)
    header.pop("header_crc32")
    header["header_crc32"] = zlib.crc32(json.dumps(header, sort_keys=True, separators=(",", ":")).encode())
    (path / "header.json").write_text(json.dumps(header))


def flip_byte(path, position):
    data = bytearray(path.read_bytes())
    data[position] ^= 0x40
    path.write_bytes(bytes(data))


def test_a_corrupt_store_is_refused_naming_the_file(tmp_path):
    files = [jpeg(6 + k, 9, seed=k) for k in range(4)]
    prefetch.pack([(d, k) for k, d in enumerate(files)], tmp_path / "good", progress=False)
    values_size = sum(len(d) for d in files)

    def copy():
        copy.n += 1
        return shutil.copytree(tmp_path / "good", tmp_path / ("c%d" % copy.n))
    copy.n = 0

    def refused(path, message, verify=False):
        with pytest.raises(StoreError, match=message) as info:
            prefetch.open_store(path, verify=verify)
        assert str(path) in str(info.value)
        assert isinstance(info.value, ValueError)

    s = copy()
    flip_byte(s / "offsets.npy", -3)  # in the table, past the .npy header
    refused(s, r"offsets.npy has crc32 \d+, header says \d+ \(corrupt copy\?\)")
    s = copy()
    (s / "values.bin").write_bytes((s / "values.bin").read_bytes()[:-100])
    refused(s, r"values.bin is %d bytes, header says %d \(truncated copy\?\)" % (values_size - 100, values_size))
    s = copy()
    rewrite_header(s, version=99)
    refused(s, "written in store format version 99; this prefetch .* reads version 1")
    s = copy()
    header = json.loads((s / "header.json").read_text())
    header["count"] = 5  # edited without updating the checksum
    (s / "header.json").write_text(json.dumps(header))
    refused(s, "header.json has checksum .* header_crc32 says")
    s = copy()
    (s / "header.json").write_text("{not json")
    refused(s, "header.json is not valid JSON")
    s = copy()
    os.remove(s / "sizes.npy")
    refused(s, r"sizes.npy \(the sizes table\) cannot be read: No such file")
    s = copy()
    offsets = np.load(s / "offsets.npy")
    offsets[2], offsets[3] = offsets[3], offsets[2]  # same total: only the order check sees it
    np.save(s / "offsets.npy", offsets)
    entry = dict(json.loads((s / "header.json").read_text())["files"]["offsets"])
    entry.update(crc32=zlib.crc32((s / "offsets.npy").read_bytes()))
    rewrite_header(s, files=dict(json.loads((s / "header.json").read_text())["files"], offsets=entry))
    refused(s, r"offsets.npy decreases at sample 2")
    # A flipped byte among the images is only seen by verify=True (opening reads none of them).
    s = copy()
    flip_byte(s / "values.bin", values_size // 2)
    store = prefetch.open_store(s)
    assert store.count == 4
    refused(s, r"values.bin has crc32 \d+, header says \d+", verify=True)
    refused(tmp_path / "nowhere", "no such directory")


# The store kept in tests/data/store_v1 (written by prefetch.pack 0.1.0, format version 1):
# 3 tiny JPEGs in classes "cat" and "dog" with a float field "weight". Their sha256, as packed:
FIXTURE_SHA256 = [
    "1f886f055018d28a96f11e73e8b9030b061b1d2fce63364fc7b3d4476147e9ee",
    "64de02f2033cb178ac1c3d06d00b8f68ca9bf82b713facb3662b051ebbf6b001",
    "01d6b9d310c5639eba9edec01920c3d8b3a95a8d766a2e691846195f0f9d34b3",
]


def write_fixture_store(dest):
    """How tests/data/store_v1 was made (kept for the record: regenerating it would change its
    bytes with the JPEG encoder's version, and the point is to keep the old bytes)."""
    import tempfile

    with tempfile.TemporaryDirectory() as src:
        for rel, (h, w, mode, seed) in {"cat/1.jpg": (8, 6, "RGB", 1), "cat/2.jpg": (5, 9, "L", 2),
                                        "dog/3.jpg": (4, 4, "RGB", 3)}.items():
            os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
            with open(os.path.join(src, rel), "wb") as f:
                f.write(jpeg(h, w, seed, mode=mode, quality=50))
        return prefetch.pack(src, dest, fields={"weight": [0.25, 1.0, 4.0]}, progress=False)


def test_a_store_written_earlier_still_opens():
    store = prefetch.open_store(FIXTURE, verify=True)
    assert store.count == 3 and store.classes == ["cat", "dog"]
    assert store.labels.tolist() == [0, 0, 1]
    assert store.image_sizes.tolist() == [[8, 6, 3], [5, 9, 3], [4, 4, 3]]
    assert store.fields["weight"].tolist() == [0.25, 1.0, 4.0]
    assert [hashlib.sha256(bytes(store[i][0].numpy())).hexdigest() for i in range(3)] == FIXTURE_SHA256
    assert [pil_hwc(bytes(store[i][0].numpy())) for i in range(3)] == store.image_sizes.tolist()
    assert store.header["created_by"] == "prefetch 0.1.0" and store.header["version"] == 1


def test_an_array_loader_reads_a_store_as_its_arrays(tmp_path):
    paths = write_tree(tmp_path / "src")
    store = prefetch.pack(tmp_path / "src", tmp_path / "s", fields={"k": list(range(12))}, progress=False)
    loader = prefetch.ArrayLoader(store.as_arrays(), 5, shuffle=False, device="cpu")
    got = [(bytes(t.numpy()), int(y), int(k)) for images, labels, ks in loader
           for t, y, k in zip(images.tensors(), labels, ks)]
    assert got == [(read(p), label, k) for k, (p, (_, label)) in enumerate(zip(paths, TREE))]


def test_the_progress_line_with_and_without_tqdm(tmp_path, capsys, monkeypatch):
    files = [jpeg(5, 5, seed=k) for k in range(3)]
    prefetch.pack(files, tmp_path / "a", progress=True)
    assert "prefetch.pack" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "tqdm", None)  # as if it were not installed
    prefetch.pack(files, tmp_path / "b", progress=True)
    assert "\rprefetch.pack: 3/3 files" in capsys.readouterr().err
    prefetch.pack(files, tmp_path / "c", progress=False)
    assert capsys.readouterr().err == ""


def run_cli(*args, module="prefetch.store"):
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_the_command_line_packs_a_folder(tmp_path):
    paths = write_tree(tmp_path / "src")
    out = run_cli(tmp_path / "src", tmp_path / "s", "--workers", "2")
    assert out.returncode == 0, out.stderr
    assert re.search(r"packed 12 JPEGs \(.* MB\) from .* into .* in [\d.]+ s: \d+ files/s", out.stdout)
    assert "3 classes" in out.stdout and "ignored 2 files" in out.stdout
    check_store_holds(prefetch.open_store(tmp_path / "s"), [read(p) for p in paths],
                      [label for _, label in TREE])
    out = run_cli(tmp_path / "missing", tmp_path / "t")
    assert out.returncode != 0
    assert "missing does not exist" in out.stderr and "Traceback" not in out.stderr
    assert out.stderr.startswith("python -m prefetch.store: error: ")
    out = run_cli(tmp_path / "src", tmp_path / "s", "--quiet")
    assert out.returncode != 0 and "exists; pass overwrite=True (--overwrite)" in out.stderr
    assert "Traceback" not in out.stderr
    assert not os.path.exists(tmp_path / "t")


def test_prefetch_pack_is_an_alias_of_prefetch_store(tmp_path):
    # The writer's old names: prefetch.pack stays the function even once a script imports the
    # module of that name, whose names are prefetch.store's own objects.
    code = ("import prefetch, prefetch.pack, prefetch.store.writer as writer\n"
            "from prefetch.pack import JPEG_EXTENSIONS, RAW_EXTENSIONS, pack\n"
            "assert prefetch.pack is pack is prefetch.store.pack is writer.pack, prefetch.pack\n"
            "assert (JPEG_EXTENSIONS, RAW_EXTENSIONS) == (writer.JPEG_EXTENSIONS, writer.RAW_EXTENSIONS)\n"
            "assert RAW_EXTENSIONS is prefetch.store.RAW_EXTENSIONS\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    paths = write_tree(tmp_path / "src")
    out = run_cli(tmp_path / "src", tmp_path / "s", "--quiet", module="prefetch.pack")
    assert out.returncode == 0 and out.stdout == "", out.stderr
    check_store_holds(prefetch.open_store(tmp_path / "s"), [read(p) for p in paths],
                      [label for _, label in TREE])
    out = run_cli(tmp_path / "missing", tmp_path / "t", module="prefetch.pack")
    assert out.returncode == 1
    assert out.stderr.startswith("python -m prefetch.pack: error: ") and "missing does not exist" in out.stderr



# -- encoding="raw": the decoded pixels ---------------------------------------------------------

def encoded(fmt, h, w, seed, mode="RGB", **save):
    """The bytes of an h x w image of noise in ``fmt`` (any format Pillow writes), in ``mode``."""
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")
    if mode == "P":
        image = image.quantize(16)
    elif mode != "RGB":
        image = image.convert(mode)
    out = io.BytesIO()
    image.save(out, fmt, **save)
    return out.getvalue()


# The folder test_raw_... packs, in ImageFolder's order: (relative path, format, h, w, mode, label).
RAW_TREE = [("a/0.png", "PNG", 5, 7, "RGB", 0), ("a/1.PNG", "PNG", 6, 4, "RGBA", 0),
            ("a/2.jpg", "JPEG", 9, 11, "RGB", 0), ("a/3.bmp", "BMP", 3, 8, "L", 0),
            ("b/0.gif", "GIF", 7, 5, "P", 1), ("b/1.JPEG", "JPEG", 8, 8, "L", 1),
            ("b/2.tif", "TIFF", 4, 6, "RGB", 1), ("b/3.webp", "WEBP", 10, 3, "RGB", 1)]


def write_raw_tree(root):
    """RAW_TREE's images and a text file (not taken). Returns the images' paths in order."""
    paths = []
    for k, (rel, fmt, h, w, mode, _) in enumerate(RAW_TREE):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encoded(fmt, h, w, seed=k, mode=mode, **({"lossless": True} if fmt == "WEBP" else {})))
        paths.append(str(path))
    (root / "b" / "notes.txt").write_text("not an image")
    return paths


def pil_rgb(path_or_bytes):
    """torchvision ImageFolder's loader: the reference for a raw store's pixels."""
    if not isinstance(path_or_bytes, str):
        path_or_bytes = io.BytesIO(path_or_bytes)
    with Image.open(path_or_bytes) as image:
        return np.asarray(image.convert("RGB"))


def check_raw_store_holds(store, pixels, labels):
    assert store.encoding == "raw" and store.header["encoding"] == "raw"
    assert len(store) == len(pixels)
    assert store.image_sizes.tolist() == [list(p.shape) for p in pixels]
    assert store.offsets.tolist() == np.concatenate([[0], np.cumsum([p.size for p in pixels])]).tolist()
    assert isinstance(store.images, prefetch.Ragged) and store.images.rank == 3
    for i, expected in enumerate(pixels):
        assert expected.shape[2] == 3
        assert np.array_equal(store.images[i].numpy(), expected), "images[%d]" % i
        sample, label = store[i]
        assert sample.dtype == torch.uint8 and np.array_equal(sample.numpy(), expected), "store[%d]" % i
        assert label == (None if labels is None else labels[i])
    assert (store.labels is None) == (labels is None)
    if labels is not None:
        assert store.labels.tolist() == list(labels)


def test_raw_encoding_stores_each_images_pixels_as_pillow_decodes_them(tmp_path):
    paths = write_raw_tree(tmp_path / "src")
    labels = [t[-1] for t in RAW_TREE]
    store = prefetch.pack(tmp_path / "src", tmp_path / "s", encoding="raw", workers=3, chunk=3,
                          progress=False)
    assert store.classes == ["a", "b"]
    pixels = [pil_rgb(p) for p in paths]
    assert [list(p.shape) for p in pixels] == [[h, w, 3] for _, _, h, w, _, _ in RAW_TREE]
    check_raw_store_holds(store, pixels, labels)
    assert [os.path.relpath(p, tmp_path / "src") for p in store.ignored] == ["b/notes.txt"]
    assert store.header["version"] == 1 and "8 raw images" in repr(store)
    check_raw_store_holds(prefetch.open_store(tmp_path / "s", verify=True), pixels, labels)
    # A JPEG store of the same folder takes only the JPEGs, as before.
    jpegs = prefetch.pack(tmp_path / "src", tmp_path / "j", progress=False)
    assert jpegs.encoding == "jpeg" and jpegs.count == 2 and jpegs.images.rank == 1
    # A list of paths, and an iterable of encoded bytes, are decoded the same.
    store = prefetch.pack(paths[::-1], tmp_path / "l", labels=labels[::-1], encoding="raw",
                          progress=False)
    check_raw_store_holds(store, pixels[::-1], labels[::-1])
    store = prefetch.pack(((read(p), {"k": k}) for k, p in enumerate(paths)), tmp_path / "i",
                          encoding="raw", chunk=3, progress=False)
    check_raw_store_holds(store, pixels, None)
    assert store.fields["k"].tolist() == list(range(len(paths)))
    # The numpy-only reader of docs/arrays.md reads the pixels.
    code = compile(docs_reader(), "docs/arrays.md", "exec")
    for i in (0, 5):
        scope = {"path": str(tmp_path / "s"), "i": i}
        exec(code, scope)
        assert np.array_equal(scope["pixels"], pixels[i]) and "jpeg" not in scope
    with pytest.raises(ValueError, match="pack's encoding must be 'jpeg' or 'raw', got 'png'"):
        prefetch.pack(paths, tmp_path / "x", encoding="png", progress=False)


def test_raw_encoding_refuses_what_pillow_cannot_decode_by_name(tmp_path):
    good = tmp_path / "good.png"
    good.write_bytes(encoded("PNG", 6, 5, seed=0))
    text = tmp_path / "notes.png"
    text.write_text("hello")
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(encoded("JPEG", 40, 40, seed=1)[:400])
    missing = tmp_path / "missing.png"
    expected = {str(text): r"not an image Pillow opens \(starts with b'hello'\)",
                str(cut): r"cannot be decoded by Pillow \(OSError: ",
                str(missing): r"cannot be read: No such file or directory"}
    for bad, message in expected.items():
        with pytest.raises(ValueError, match=re.escape(bad) + ": " + message):
            prefetch.pack([good, bad], tmp_path / "s", encoding="raw", progress=False)
        assert not os.path.exists(tmp_path / "s")
    store = prefetch.pack([good, text, cut, good, missing], tmp_path / "s", labels=[0, 1, 2, 3, 4],
                          encoding="raw", on_error="skip", progress=False)
    check_raw_store_holds(store, [pil_rgb(str(good))] * 2, [0, 3])
    assert [name for name, _ in store.skipped] == [str(text), str(cut), str(missing)]
    # In a folder, a file named as an image that is not one; a sample of an iterable.
    (tmp_path / "tree" / "a").mkdir(parents=True)
    (tmp_path / "tree" / "a" / "fake.webp").write_text("<html>")
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "tree" / "a" / "fake.webp"))
                       + r": not an image Pillow opens \(starts with b'<html>'\)"):
        prefetch.pack(tmp_path / "tree", tmp_path / "t", encoding="raw", progress=False)
    with pytest.raises(ValueError, match=r"sample 1: not an image \(empty: 0 bytes\)"):
        prefetch.pack([read(good), b""], tmp_path / "t", encoding="raw", progress=False)
    # More pixels than prefetch.ops.max_image_pixels(): refused as a possible bomb, by name.
    previous = prefetch.ops.set_max_image_pixels(29)
    try:
        with pytest.raises(ValueError, match=re.escape(str(good)) + r": 6 x 5 = 30 pixels, more "
                           r"than the limit of 29 .* decompression bomb"):
            prefetch.pack([good], tmp_path / "t", encoding="raw", progress=False)
        prefetch.ops.set_max_image_pixels(30)
        assert prefetch.pack([good], tmp_path / "t", encoding="raw", progress=False).count == 1
    finally:
        prefetch.ops.set_max_image_pixels(previous)
    assert not [n for n in os.listdir(tmp_path) if ".partial-" in n]


def test_raw_encoding_without_pillow_says_to_install_it(tmp_path, monkeypatch):
    data = jpeg(6, 6, seed=0)
    monkeypatch.setitem(sys.modules, "PIL", None)  # as if it were not installed
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    with pytest.raises(ImportError, match="pip install pillow"):
        prefetch.pack([data], tmp_path / "s", encoding="raw", progress=False)
    assert not os.path.exists(tmp_path / "s")
    assert prefetch.pack([data], tmp_path / "s", progress=False).count == 1  # JPEG needs none


def rewrite_table(path, name, array):
    """Replaces a table's file and its entry (size, checksum) in a header rewritten with a correct
    header_crc32, so that only the check of the tables' agreement can refuse it."""
    np.save(path / (name + ".npy"), array)
    header = json.loads((path / "header.json").read_text())
    data = (path / (name + ".npy")).read_bytes()
    header["files"][name].update(bytes=len(data), crc32=zlib.crc32(data))
    header["header_crc32"] = prefetch.store.header_crc32(header)
    (path / "header.json").write_text(json.dumps(header))


def test_a_corrupt_or_unknown_raw_store_is_refused(tmp_path):
    files = [encoded("PNG", 4 + k, 5, seed=k) for k in range(4)]
    prefetch.pack(files, tmp_path / "good", encoding="raw", progress=False)

    def refused(path, message):
        with pytest.raises(StoreError, match=message) as info:
            prefetch.open_store(path)
        assert str(path) in str(info.value)

    s = shutil.copytree(tmp_path / "good", tmp_path / "c1")
    sizes = np.load(s / "sizes.npy")
    sizes[2, 1] += 1  # sample 2 is 6 x 5 x 3 = 90 bytes, said to be 6 x 6 x 3 = 108
    rewrite_table(s, "sizes", sizes)
    refused(s, "offsets.npy gives sample 2 90 bytes, but sizes.npy says it is 6 x 6 x 3 = 108 bytes")
    s = shutil.copytree(tmp_path / "good", tmp_path / "c2")
    offsets = np.load(s / "offsets.npy")
    offsets[1] += 3  # samples 0 and 1 shifted, the total unchanged
    rewrite_table(s, "offsets", offsets)
    refused(s, "offsets.npy gives sample 0 63 bytes, but sizes.npy says it is 4 x 5 x 3 = 60 bytes")
    s = shutil.copytree(tmp_path / "good", tmp_path / "c3")
    sizes = np.load(s / "sizes.npy")
    sizes[3] = [10, 7, 1]  # the same bytes, not 3 channels
    rewrite_table(s, "sizes", sizes)
    refused(s, r"sizes.npy: sample 3 has size \[10, 7, 1\], expected \(height, width, 3\)")
    # An encoding this prefetch does not know, in a header whose checksum is right.
    s = shutil.copytree(tmp_path / "good", tmp_path / "c4")
    header = json.loads((s / "header.json").read_text())
    header["encoding"] = "jpeg-xl"
    header["header_crc32"] = prefetch.store.header_crc32(header)
    (s / "header.json").write_text(json.dumps(header))
    refused(s, "header.json says encoding 'jpeg-xl', which this prefetch does not know: it reads "
               "'jpeg' and 'raw'")
    assert prefetch.open_store(tmp_path / "good", verify=True).count == 4


def test_a_raw_store_feeds_fused_augment_without_a_decode(tmp_path):
    files = [encoded("PNG", 20 + 3 * k, 33 - 2 * k, seed=k) for k in range(10)]
    store = prefetch.pack([(d, k % 3) for k, d in enumerate(files)], tmp_path / "s",
                          encoding="raw", progress=False)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

    def augment():
        return prefetch.FusedAugment(mean, std, random_resized_crop=16, seed=0)

    loader = prefetch.ArrayLoader(store, 4, transform=augment(), device="cpu")
    order = loader.epoch_indices(0).tolist()
    assert sorted(order) == list(range(10)) and order != list(range(10))
    batches = list(loader)
    assert len(batches) == 3
    direct = augment()
    for b, (images, labels) in enumerate(batches):
        rows = order[4 * b:4 * b + 4]
        ragged = prefetch.Ragged.from_tensors([torch.from_numpy(pil_rgb(files[i])) for i in rows])
        expected = direct(ragged, epoch=0, index=b)
        assert images.shape == (len(rows), 3, 16, 16) and images.dtype == torch.float32
        assert torch.equal(images, expected), "batch %d" % b
        assert labels.tolist() == [i % 3 for i in rows]


def test_the_command_line_packs_raw_pixels(tmp_path):
    paths = write_raw_tree(tmp_path / "src")
    out = run_cli(tmp_path / "src", tmp_path / "s", "--encoding", "raw", "--workers", "2")
    assert out.returncode == 0, out.stderr
    assert re.search(r"packed 8 images as raw pixels \(.* MB\) from .* into .* in [\d.]+ s", out.stdout)
    assert "2 classes" in out.stdout and "ignored 1 files not named *.jpg/" in out.stdout
    check_raw_store_holds(prefetch.open_store(tmp_path / "s"), [pil_rgb(p) for p in paths],
                          [t[-1] for t in RAW_TREE])
    out = run_cli(tmp_path / "src", tmp_path / "t", "--encoding", "webp")
    assert out.returncode != 0 and "invalid choice: 'webp'" in out.stderr

if __name__ == "__main__":
    # python -m tests.loaders.test_store DEST: writes the fixture store (see write_fixture_store)
    # and prints its samples' sha256.
    made = write_fixture_store(sys.argv[1])
    print([hashlib.sha256(bytes(made[i][0].numpy())).hexdigest() for i in range(made.count)])
