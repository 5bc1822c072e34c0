"""What ``python -m prefetch.bench`` records about the code it measured: the commit of the git
checkout prefetch is imported from, and whether that checkout had uncommitted changes.

A figure names the commit it measured, or it cannot be reproduced: the bench refuses to write
results from a dirty checkout unless ``--allow-dirty``, and then results.json says so (``dirty``,
``changed_files`` and the first ``MAX_NAMES`` of them in ``changed``). What git ignores (build
outputs, ``bench-out/``) does not make a checkout dirty; an untracked file that git does not
ignore does (it may be imported). Where prefetch is not imported from a git checkout (an
installed wheel), the version stands for the code: ``commit`` and ``dirty`` are None and ``why``
says why. The benchmark scripts of ``benchmarks/`` begin their JSON results with
:func:`script_record` and write them with :func:`write_record`.
"""
import json
import os
import platform
import subprocess
import time

import torch

import prefetch

MAX_NAMES = 20  # changed files named in results.json (all of them are counted)
_GIT_TIMEOUT_S = 30


def _git(directory, *args):
    """``git -C directory args...`` -> (returncode, stdout, stderr); raises OSError (no git) or
    subprocess.TimeoutExpired."""
    done = subprocess.run(["git", "-C", directory, *args], capture_output=True, text=True,
                          timeout=_GIT_TIMEOUT_S)
    return done.returncode, done.stdout, done.stderr


def changed_paths(porcelain_z):
    """The paths of ``git status --porcelain=v1 -z`` output, in its order. Each record is
    ``XY path``, NUL-terminated; a rename or copy (X or Y ``R``/``C``) is followed by a second
    NUL-terminated field, the path it came from, which is not another change."""
    fields = porcelain_z.split("\0")
    paths, i = [], 0
    while i < len(fields):
        record = fields[i]
        i += 1
        if not record:
            continue
        paths.append(record[3:])
        if "R" in record[:2] or "C" in record[:2]:
            i += 1  # the origin of the rename or copy
    return paths


def _installed(why):
    return {"commit": None, "source": "installed", "version": prefetch.__version__,
            "dirty": None, "changed_files": None, "changed": [], "why": why}


def checkout_state(package_dir=None):
    """The state of the code measured: a dict with ``commit`` (``git rev-parse HEAD``, or None),
    ``source`` (``"git"`` or ``"installed"``), ``checkout`` (the repository's root), ``version``
    (``prefetch.__version__``), ``dirty`` (bool, None when unknown), ``changed_files`` (int),
    ``changed`` (at most ``MAX_NAMES`` paths) and ``why`` (when not a git checkout).

    ``package_dir`` (default: the directory prefetch is imported from) counts as a git checkout
    only when its ``__init__.py`` is tracked by the repository around it: a wheel installed in a
    virtual environment that happens to lie inside some repository is not that repository's
    code."""
    package_dir = os.path.abspath(package_dir or os.path.dirname(prefetch.__file__))
    try:
        rc, top, err = _git(package_dir, "rev-parse", "--show-toplevel")
        if rc != 0:
            return _installed("not in a git checkout (git: %s)" % (err.strip().splitlines() or ["?"])[0])
        top = top.strip()
        init = os.path.relpath(os.path.join(package_dir, "__init__.py"), top)
        rc, _, _ = _git(top, "ls-files", "--error-unmatch", "--", init)
        if rc != 0:
            return _installed("%s is not tracked by the git repository at %s" % (init, top))
        rc, head, err = _git(top, "rev-parse", "HEAD")
        if rc != 0:
            return _installed("git rev-parse HEAD failed at %s: %s" % (top, err.strip()))
        rc, status, err = _git(top, "status", "--porcelain=v1", "-z", "--untracked-files=normal")
        if rc != 0:
            return _installed("git status failed at %s: %s" % (top, err.strip()))
    except (OSError, subprocess.SubprocessError) as exc:
        return _installed("git could not be run: %s: %s" % (type(exc).__name__, exc))
    paths = changed_paths(status)
    return {"commit": head.strip(), "source": "git", "checkout": top,
            "version": prefetch.__version__, "dirty": bool(paths), "changed_files": len(paths),
            "changed": paths[:MAX_NAMES]}


def refusal(state):
    """The message ``python -m prefetch.bench`` exits with for a dirty checkout without
    ``--allow-dirty``; None when the checkout is clean or not a git checkout."""
    if not state.get("dirty"):
        return None
    more = state["changed_files"] - len(state["changed"])
    return ("prefetch bench: the checkout at %s has %d uncommitted change(s) (%s%s), so its "
            "figures would name no commit (%s) that holds the code measured. Commit them, or pass "
            "--allow-dirty: results.json then says \"dirty\": true and lists them."
            % (state["checkout"], state["changed_files"], ", ".join(state["changed"]),
               ", and %d more" % more if more > 0 else "", state["commit"][:12]))


def script_record(benchmark: str) -> dict:
    """What every benchmark script's JSON result begins with, so that no figure is published
    without its provenance: the script, the commit measured and whether the tree differed from it
    (:func:`checkout_state`), the UTC date, the machine's usable cores and platform, and torch's
    version.

    Args:
        benchmark (str): the script, as the repository names it (``benchmarks/....py``).

    Returns:
        dict: ``benchmark``, ``commit``, ``dirty``, ``changed``, ``date``, ``machine`` (``cores``,
        ``platform``) and ``torch``; the caller adds its figures.
    """
    state = checkout_state()
    return {"benchmark": benchmark, "commit": state["commit"], "dirty": state["dirty"],
            "changed": state.get("changed"),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {"cores": len(os.sched_getaffinity(0)), "platform": platform.platform()},
            "torch": torch.__version__}


def write_record(path: str, record: dict) -> None:
    """``record`` written to ``path`` as indented JSON with a final newline (what the results
    files in benchmarks/results/ hold).

    Raises:
        OSError: the file cannot be written.
    """
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")

