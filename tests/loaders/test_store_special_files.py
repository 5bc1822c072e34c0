"""Only regular files are read: pack and open_store refuse (or, with on_error="skip", skip) by
name whatever else a path names — a FIFO (reading one blocks until a writer comes: forever), a
socket, a device (/dev/zero never ends), a directory, a symlink to any of them, a symlink loop,
a dangling link — and a folder's symlink back to a folder it lies in (os.walk followed the loop,
packing the same files again at every turn). Each case runs in a child interpreter with a time
limit: the bug these tests guard against is a hang."""
import json
import os
import textwrap

import pytest

from ..helpers import run_child

pytest.importorskip("PIL.Image")

# Child code: makes `path` a thing of `kind`; `keep` holds what must stay alive (a socket).
MAKE = textwrap.dedent("""
    import io, json, os, socket, sys
    import numpy as np
    from PIL import Image
    import prefetch
    from prefetch.store import StoreError

    def jpeg(seed):
        rng = np.random.default_rng(seed)
        out = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)).save(out, "JPEG")
        return out.getvalue()

    keep = []

    def make(kind, path, scratch):
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "socket":
            s = socket.socket(socket.AF_UNIX)
            here = os.getcwd()
            os.chdir(os.path.dirname(path))  # a relative name: AF_UNIX paths are short
            try:
                s.bind(os.path.basename(path))
            finally:
                os.chdir(here)
            keep.append(s)
        elif kind == "dev-zero":
            os.symlink("/dev/zero", path)
        elif kind == "dev-null":
            os.symlink("/dev/null", path)
        elif kind == "directory":
            os.mkdir(path)
        elif kind == "link-to-fifo":
            target = os.path.join(scratch, "fifo-%d" % len(os.listdir(scratch)))
            os.mkfifo(target)
            os.symlink(target, path)
        elif kind == "link-loop":
            os.symlink(path, path)  # resolves to itself: ELOOP
        elif kind == "dangling":
            os.symlink(os.path.join(scratch, "nothing-here"), path)
        else:
            raise AssertionError(kind)

    def refusal(fn):
        try:
            fn()
        except (ValueError, OSError) as e:
            return e
        raise AssertionError("not refused")
""")

# What each kind's refusal says (the reason pack and open_store give, by name).
REASON = {
    "fifo": "a FIFO (named pipe), not a regular file",
    "socket": "a socket, not a regular file",
    "dev-zero": "a character device, not a regular file",
    "dev-null": "a character device, not a regular file",
    "directory": "a directory, not a regular file",
    "link-to-fifo": "a FIFO (named pipe), not a regular file",
    "link-loop": "Too many levels of symbolic links",
    "dangling": "No such file or directory",
}


@pytest.mark.parametrize("kind", sorted(REASON))
def test_pack_refuses_or_skips_what_is_not_a_regular_file_by_name(tmp_path, kind):
    """A folder holding x.jpg of `kind` beside two JPEGs: on_error="raise" names it and the
    kind; "skip" packs exactly the two JPEGs (their bytes, read here with open()) and lists x.jpg
    with the reason. The same through a list of paths. Nothing hangs (the child's time limit)."""
    script = MAKE + textwrap.dedent("""
        root, kind = %r, %r
        scratch = os.path.join(root, "scratch"); os.mkdir(scratch)
        src = os.path.join(root, "src", "cat"); os.makedirs(src)
        for name, seed in (("a.jpg", 0), ("b.jpg", 1)):
            with open(os.path.join(src, name), "wb") as f:
                f.write(jpeg(seed))
        bad = os.path.join(src, "x.jpg")
        make(kind, bad, scratch)
        expected = [open(os.path.join(src, n), "rb").read() for n in ("a.jpg", "b.jpg")]
        if kind != "directory":  # a folder's directory is a subfolder, not a file to read
            e = refusal(lambda: prefetch.pack(os.path.join(root, "src"), os.path.join(root, "s1"),
                                              progress=False))
            print("raise:", type(e).__name__, e)
            assert not os.path.exists(os.path.join(root, "s1"))
            store = prefetch.pack(os.path.join(root, "src"), os.path.join(root, "s2"),
                                  on_error="skip", progress=False)
            assert [bytes(store[i][0].numpy()) for i in range(len(store))] == expected
            assert [name for name, _ in store.skipped] == [bad], store.skipped
            print("skip:", store.skipped[0][1])
        paths = [os.path.join(src, "a.jpg"), bad, os.path.join(src, "b.jpg")]
        e = refusal(lambda: prefetch.pack(paths, os.path.join(root, "s3"), progress=False))
        print("list raise:", type(e).__name__, e)
        store = prefetch.pack(paths, os.path.join(root, "s4"), on_error="skip", progress=False)
        assert [bytes(store[i][0].numpy()) for i in range(len(store))] == expected
        assert [name for name, _ in store.skipped] == [bad]
        print("list skip:", store.skipped[0][1])
        print("done")
    """ % (str(tmp_path), kind))
    out = run_child(script, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "done" in out.stdout, out.stdout
    bad = str(tmp_path / "src" / "cat" / "x.jpg")
    for line in out.stdout.splitlines():
        if line.startswith(("raise:", "list raise:")):
            assert "ValueError" in line and bad in line and REASON[kind] in line, line
        elif line.startswith(("skip:", "list skip:")):
            assert REASON[kind] in line, line


STORE_FILES = ["header.json", "offsets.npy", "sizes.npy", "labels.npy", "values.bin"]


@pytest.mark.parametrize("kind", sorted(REASON))
def test_open_store_refuses_a_file_that_is_not_regular_by_name(tmp_path, kind):
    """Each of a store's files replaced by a thing of `kind`: open_store raises StoreError naming
    the store, the file and the kind (never blocks on a FIFO, never reads /dev/zero forever).
    A copy of the same store whose files are symlinks to regular files opens."""
    script = MAKE + textwrap.dedent("""
        import shutil
        root, kind, files = %r, %r, %r
        scratch = os.path.join(root, "scratch"); os.mkdir(scratch)
        good = os.path.join(root, "good")
        prefetch.pack([(jpeg(k), k) for k in range(3)], good, progress=False)
        for name in files:
            copy = shutil.copytree(good, os.path.join(root, "bad-" + name))
            os.remove(os.path.join(copy, name))
            make(kind, os.path.join(copy, name), scratch)
            e = refusal(lambda: prefetch.open_store(copy))
            assert isinstance(e, StoreError), repr(e)
            print("refused:", name, "|", e)
        linked = os.path.join(root, "linked"); os.mkdir(linked)
        for name in os.listdir(good):
            os.symlink(os.path.join(good, name), os.path.join(linked, name))
        assert len(prefetch.open_store(linked, verify=True)) == 3
        print("done")
    """ % (str(tmp_path), kind, STORE_FILES))
    out = run_child(script, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "done" in out.stdout, out.stdout
    refused = [line for line in out.stdout.splitlines() if line.startswith("refused:")]
    assert len(refused) == len(STORE_FILES)
    for name, line in zip(STORE_FILES, refused):
        assert str(tmp_path / ("bad-" + name)) in line and name in line and REASON[kind] in line, line


def test_a_store_dest_whose_header_is_a_fifo_is_not_read(tmp_path):
    """pack(..., overwrite=True) reads an existing dest's header.json to tell a store from
    anything else: a FIFO there is not read (it was: the open blocked), and dest is not
    replaced."""
    script = MAKE + textwrap.dedent("""
        root = %r
        dest = os.path.join(root, "dest"); os.mkdir(dest)
        os.mkfifo(os.path.join(dest, "header.json"))
        e = refusal(lambda: prefetch.pack([jpeg(0)], dest, overwrite=True, progress=False))
        print(type(e).__name__, e)
        assert os.path.exists(os.path.join(dest, "header.json"))
        print("done")
    """ % str(tmp_path))
    out = run_child(script, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "FileExistsError" in out.stdout and "is not a prefetch store" in out.stdout, out.stdout


def write_jpegs(folder, names):
    from .test_store import jpeg

    os.makedirs(folder, exist_ok=True)
    files = []
    for k, name in enumerate(names):
        data = jpeg(6, 5 + k, seed=k)
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
        files.append(data)
    return files


@pytest.mark.parametrize("target", ["class", "root", "parent"])
def test_a_symlink_loop_in_a_folder_is_refused_naming_the_link(tmp_path, target):
    """cat/sub -> cat (or -> the root, or a link in a subfolder back to its parent): refused
    naming the link, where os.walk(followlinks=True) packed the class's files again at every
    turn of the loop (41 copies of each)."""
    import prefetch

    write_jpegs(tmp_path / "src" / "cat", ["a.jpg"])
    write_jpegs(tmp_path / "src" / "cat" / "inner", ["b.jpg"])
    link = {"class": tmp_path / "src" / "cat" / "sub", "root": tmp_path / "src" / "cat" / "up",
            "parent": tmp_path / "src" / "cat" / "inner" / "back"}[target]
    goes_to = {"class": tmp_path / "src" / "cat", "root": tmp_path / "src",
               "parent": tmp_path / "src" / "cat"}[target]
    os.symlink(goes_to, link)
    with pytest.raises(ValueError, match="symlink loop") as info:
        prefetch.pack(tmp_path / "src", tmp_path / "s", progress=False)
    assert str(link) in str(info.value) and str(goes_to) in str(info.value)
    assert not os.path.exists(tmp_path / "s")


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_class_entry_linking_to_itself_is_refused_naming_it(tmp_path, on_error):
    """src/c -> c (a link that cannot be followed at all, ELOOP) among the class folders:
    refused naming the link, with on_error="skip" too (the folder's layout is not a file to
    skip), where os.DirEntry.is_dir() raised a bare OSError. Inside a class folder such a link
    is no folder and not named as an image: ignored and listed, as ImageFolder ignores it."""
    import prefetch

    write_jpegs(tmp_path / "src" / "cat", ["a.jpg"])
    os.symlink("c", tmp_path / "src" / "c")
    with pytest.raises(ValueError, match="symlink loop") as info:
        prefetch.pack(tmp_path / "src", tmp_path / "s", progress=False, on_error=on_error)
    assert str(tmp_path / "src" / "c") in str(info.value)
    assert not os.path.exists(tmp_path / "s")
    os.remove(tmp_path / "src" / "c")
    os.symlink("c", tmp_path / "src" / "cat" / "c")
    store = prefetch.pack(tmp_path / "src", tmp_path / "s", progress=False, on_error=on_error)
    assert len(store) == 1 and str(tmp_path / "src" / "cat" / "c") in store.ignored


def test_a_class_folder_that_links_to_the_root_is_refused(tmp_path):
    import prefetch

    write_jpegs(tmp_path / "src" / "cat", ["a.jpg"])
    os.symlink(tmp_path / "src", tmp_path / "src" / "dog")
    with pytest.raises(ValueError, match="symlink loop") as info:
        prefetch.pack(tmp_path / "src", tmp_path / "s", progress=False)
    assert str(tmp_path / "src" / "dog") in str(info.value)


def test_symlinked_folders_that_make_no_loop_are_followed_as_imagefolder_does(tmp_path):
    """A class folder that is a link, and a link inside a class to a folder elsewhere (even the
    same folder twice, from two classes): followed, each file taken once per path it is reached
    by, in ImageFolder's order (os.walk(followlinks=True), sorted; written out here)."""
    import prefetch

    elsewhere = write_jpegs(tmp_path / "elsewhere", ["e0.jpg", "e1.jpg"])
    cat = write_jpegs(tmp_path / "src" / "cat", ["a.jpg"])
    os.symlink(tmp_path / "elsewhere", tmp_path / "src" / "cat" / "more")
    os.symlink(tmp_path / "elsewhere", tmp_path / "src" / "dog")
    store = prefetch.pack(tmp_path / "src", tmp_path / "s", progress=False)
    expected = cat + elsewhere + elsewhere
    assert [bytes(store[i][0].numpy()) for i in range(len(store))] == expected
    assert store.labels.tolist() == [0, 0, 0, 1, 1]
    assert json.loads((tmp_path / "s" / "header.json").read_text())["classes"] == ["cat", "dog"]
