"""The commit a bench run names, and its refusal to write results from a dirty checkout: against
real git repositories made here (git's own answers are the reference)."""
import json
import os
import shutil
import subprocess

import pytest

from prefetch.bench import __main__ as bench_main
from prefetch.bench import provenance
from prefetch.bench.__main__ import main
from prefetch.bench.section import Section, SectionResult, resources

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(repo, *args):
    env = dict(os.environ, GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], check=True, capture_output=True, text=True, env=env).stdout


@pytest.fixture
def checkout(tmp_path):
    """A repository holding a package ``pkg`` (tracked), a .gitignore for ``out/``, one commit."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("x = 1\n")
    (repo / "pkg" / "a.py").write_text("y = 2\n")
    (repo / ".gitignore").write_text("out/\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "first")
    return repo


def test_a_clean_checkout_names_its_commit(checkout):
    state = provenance.checkout_state(str(checkout / "pkg"))
    assert state["commit"] == git(checkout, "rev-parse", "HEAD").strip()
    assert state["source"] == "git" and state["checkout"] == str(checkout)
    assert (state["dirty"], state["changed_files"], state["changed"]) == (False, 0, [])
    assert provenance.refusal(state) is None
    # What git ignores does not make it dirty.
    (checkout / "out").mkdir()
    (checkout / "out" / "results.json").write_text("{}")
    assert provenance.checkout_state(str(checkout / "pkg"))["dirty"] is False


def test_every_kind_of_change_makes_it_dirty_and_is_named(checkout):
    (checkout / "pkg" / "a.py").write_text("y = 3\n")                 # modified
    (checkout / "new.py").write_text("")                              # untracked, not ignored
    git(checkout, "mv", "pkg/__init__.py", "pkg/init2.py")            # renamed (staged)
    state = provenance.checkout_state(str(checkout / "pkg"))
    # (the package's own __init__.py is gone from HEAD's index now: a tracked package is needed)
    assert state["source"] == "installed"
    git(checkout, "mv", "pkg/init2.py", "pkg/__init__.py")
    git(checkout, "mv", "pkg/a.py", "pkg/b.py")
    state = provenance.checkout_state(str(checkout / "pkg"))
    assert state["dirty"] is True
    want = sorted(line[3:].split(" -> ")[-1]
                  for line in git(checkout, "status", "--porcelain=v1").splitlines())
    assert sorted(state["changed"]) == want == ["new.py", "pkg/b.py"]
    assert state["changed_files"] == 2
    message = provenance.refusal(state)
    assert "2 uncommitted change(s) (" in message and "new.py" in message
    assert "--allow-dirty" in message and state["commit"][:12] in message


def test_many_changes_are_all_counted_and_the_first_named(checkout):
    for i in range(provenance.MAX_NAMES + 5):
        (checkout / ("f%02d.txt" % i)).write_text("")
    state = provenance.checkout_state(str(checkout / "pkg"))
    assert state["changed_files"] == provenance.MAX_NAMES + 5
    assert len(state["changed"]) == provenance.MAX_NAMES
    assert "and 5 more" in provenance.refusal(state)


def test_without_a_git_checkout_the_version_stands_for_the_code(tmp_path, checkout, monkeypatch):
    import prefetch

    plain = tmp_path / "site-packages" / "pkg"
    plain.mkdir(parents=True)
    (plain / "__init__.py").write_text("")
    state = provenance.checkout_state(str(plain))
    assert state["source"] == "installed" and state["commit"] is None and state["dirty"] is None
    assert state["version"] == prefetch.__version__ and "not in a git checkout" in state["why"]
    assert provenance.refusal(state) is None
    # A package inside a repository that does not track it (a venv in a checkout).
    venv_pkg = checkout / "venv" / "pkg"
    venv_pkg.mkdir(parents=True)
    (venv_pkg / "__init__.py").write_text("")
    state = provenance.checkout_state(str(venv_pkg))
    assert state["source"] == "installed" and "is not tracked" in state["why"]

    def no_git(*a, **k):
        raise FileNotFoundError("git")
    monkeypatch.setattr(provenance.subprocess, "run", no_git)
    state = provenance.checkout_state(str(checkout / "pkg"))
    assert state["source"] == "installed" and "git could not be run" in state["why"]


def test_changed_paths_reads_renames_as_one_change():
    assert provenance.changed_paths(" M a.py\0R  new.py\0old.py\0?? d/\0") == ["a.py", "new.py", "d/"]
    assert provenance.changed_paths("") == []


def _fake_section(monkeypatch):
    def run(config):
        return SectionResult({"ran": True}, {"fake_metric": 1.0},
                             resources={"a": resources(threads=config.workers),
                                        "b": resources(workers=config.workers)})
    monkeypatch.setitem(bench_main.BY_NAME, "fake", Section("fake", "a fake", run))


def test_a_dirty_checkout_is_refused_unless_allowed_and_then_said(tmp_path, checkout, monkeypatch):
    _fake_section(monkeypatch)
    (checkout / "pkg" / "a.py").write_text("y = 3\n")
    dirty = provenance.checkout_state(str(checkout / "pkg"))
    monkeypatch.setattr(provenance, "checkout_state", lambda: dirty)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as refused:
        main(["--sections", "fake", "--workers", "2", "--out", str(out)])
    assert "1 uncommitted change(s) (pkg/a.py)" in str(refused.value.code)
    assert not out.exists()  # refused before measuring anything
    assert main(["--allow-dirty", "--sections", "fake", "--workers", "2", "--out", str(out)]) == 0
    result = json.loads((out / "results.json").read_text())
    assert result["dirty"] is True and result["changed"] == ["pkg/a.py"]
    assert result["changed_files"] == 1 and result["commit"] == dirty["commit"]
    assert result["workers"] == 2 and result["resources"] == {
        "fake": {"a": {"workers": 0, "threads": 2}, "b": {"workers": 2, "threads": 0}}}


def test_a_clean_checkout_writes_its_commit(tmp_path, checkout, monkeypatch):
    _fake_section(monkeypatch)
    clean = provenance.checkout_state(str(checkout / "pkg"))
    monkeypatch.setattr(provenance, "checkout_state", lambda: clean)
    assert main(["--sections", "fake", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["commit"] == clean["commit"] and result["dirty"] is False
    assert result["changed"] == [] and result["metrics"] == {"fake_metric": 1.0}


def test_a_scripts_record_names_its_commit_and_is_written_whole(tmp_path, checkout, monkeypatch):
    dirty_pkg = provenance.checkout_state(str(checkout / "pkg"))
    monkeypatch.setattr(provenance, "checkout_state", lambda: dirty_pkg)
    record = provenance.script_record("benchmarks/some_bench.py")
    assert record["benchmark"] == "benchmarks/some_bench.py"
    assert (record["commit"], record["dirty"], record["changed"]) == (
        dirty_pkg["commit"], dirty_pkg["dirty"], dirty_pkg["changed"])
    assert record["machine"]["cores"] == len(os.sched_getaffinity(0)) and record["torch"]
    assert record["date"].endswith("Z")
    record["ratio"] = {"median": 1.5, "min": 1.2, "max": 1.7}
    provenance.write_record(str(tmp_path / "r.json"), record)
    text = (tmp_path / "r.json").read_text()
    assert text.endswith("\n") and json.loads(text) == record
