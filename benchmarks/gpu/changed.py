"""What changed since the GPU last proved it: per target (a kernel under compute-sanitizer, a
bench section's fair figure), the commit of its last clean run and git's diff since then.

    python benchmarks/gpu/changed.py sanitize      # which sanitizer targets the next run needs
    python benchmarks/gpu/changed.py bench_fair    # which fair bench sections

A GPU is lent for 15 minutes now and then; a kernel that compute-sanitizer passed at some commit
and that nobody touched since need not take that time again. The record,
benchmarks/results/gpu_clean_runs.json, holds one entry per target and kind:

    {"sanitize": {"color_jitter": {"commit": "<sha>", "uncommitted": [...], "sources": "<sha256>",
                                   "date": "...", "device": "...", ...}, ...},
     "bench_fair": {"h2d": {...}, ...}}

written (into build/gpu_check/, which git ignores, and $OUT/; the session commits $OUT's copy
here) by gpu_check.sh's stage when the target came out clean (every sanitizer tool, no error)
or measured fairly (a section that finished, N workers = N threads = the cores). A target runs
again when it has no entry, when its commit is not in this history, or when `git diff <commit>`
(the working tree against that commit, uncommitted changes included) or an untracked file names
one of its sources; unless its sources' digest equals the recorded one (the same bytes, e.g. an
uncommitted change that was sanitized and committed since). Every case says why.

The record is read from the checkout and from build/gpu_check/ (ignored, so it outlives the next
device call's copy of the tree on a warm machine); per target the newer entry wins. Standard
library only, as record.py: it must work whatever else is broken.
"""
import argparse
import datetime
import hashlib
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORD = os.path.join("benchmarks", "results", "gpu_clean_runs.json")
LOCAL_RECORD = os.path.join("build", "gpu_check", "gpu_clean_runs.json")
KINDS = ("sanitize", "bench_fair")


def git(repo, *args, timeout=60):
    """(returncode, stdout) of `git -C repo args`; (None, why) when git itself cannot run."""
    try:
        p = subprocess.run(["git", "-C", repo] + list(args), capture_output=True, text=True,
                           timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    return p.returncode, p.stdout if p.returncode == 0 else p.stderr


def head(repo=ROOT):
    """(commit, uncommitted file count) of the checkout: what a result was measured on.
    (None, None) outside a git checkout."""
    rc, out = git(repo, "rev-parse", "HEAD")
    if rc != 0:
        return None, None
    rc2, status = git(repo, "status", "--porcelain")
    return out.strip(), (len(status.splitlines()) if rc2 == 0 else None)


def known(repo, commit):
    rc, _ = git(repo, "cat-file", "-e", "%s^{commit}" % commit)
    return rc == 0


def changed_files(repo, commit, paths):
    """Files under `paths` that differ between `commit` and the working tree (committed since,
    staged or not, deleted), and untracked ones: sorted, relative to the repository."""
    rc, diff = git(repo, "diff", "--name-only", commit, "--", *paths)
    if rc != 0:
        raise RuntimeError("git diff %s failed: %s" % (commit, diff.strip()))
    rc, new = git(repo, "ls-files", "--others", "--exclude-standard", "--", *paths)
    files = set(diff.split()) | (set(new.split()) if rc == 0 else set())
    return sorted(files)


def sources_digest(repo, paths):
    """sha256 over the (path, content) of every file git would track under `paths` in the
    working tree (tracked and untracked, not ignored): equal digests, equal sources."""
    rc, out = git(repo, "ls-files", "--cached", "--others", "--exclude-standard", "--", *paths)
    if rc != 0:
        return None
    h = hashlib.sha256()
    for name in sorted(set(out.split("\n")) - {""}):
        full = os.path.join(repo, name)
        if not os.path.isfile(full):  # tracked but deleted in the working tree
            continue
        with open(full, "rb") as f:
            h.update(name.encode() + b"\0" + hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def _load(path):
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def load(repo=ROOT):
    """The record: the checkout's, with build/gpu_check/'s newer entries over it."""
    merged = _load(os.path.join(repo, RECORD))
    local = _load(os.path.join(repo, LOCAL_RECORD))
    for kind in KINDS:
        entries = dict(merged.get(kind) or {})
        for name, entry in (local.get(kind) or {}).items():
            if name not in entries or str(entry.get("date", "")) > str(entries[name].get("date", "")):
                entries[name] = entry
        merged[kind] = entries
    return merged


def select(entries, targets, repo=ROOT):
    """{name: {"run": bool, "why": str, "files": [...]}} for each of `targets` ({name: [paths]},
    git pathspecs relative to the repository), against `entries` ({name: record entry})."""
    out = {}
    for name, paths in targets.items():
        entry = entries.get(name)
        if not entry or not entry.get("commit"):
            out[name] = {"run": True, "why": "no clean run recorded", "files": []}
            continue
        commit = entry["commit"]
        short = commit[:10]
        if entry.get("sources") and entry["sources"] == sources_digest(repo, paths):
            out[name] = {"run": False, "why": "the same sources as the clean run at %s" % short,
                         "files": []}
            continue
        if not known(repo, commit):
            out[name] = {"run": True, "why": "its clean run's commit %s is not in this history"
                         % short, "files": []}
            continue
        files = changed_files(repo, commit, paths)
        if files:
            out[name] = {"run": True, "files": files,
                         "why": "%d file(s) changed since %s: %s%s" % (
                             len(files), short, ", ".join(files[:4]), ", ..." if len(files) > 4 else "")}
        elif entry.get("uncommitted"):
            # Measured on uncommitted sources that differ from today's (the digest said so).
            out[name] = {"run": True, "files": [],
                         "why": "its clean run at %s had uncommitted changes (%s) that are not "
                                "today's sources" % (short, ", ".join(entry["uncommitted"][:4]))}
        else:
            out[name] = {"run": False, "why": "unchanged since %s" % short, "files": []}
    return out


def entry_for(paths, repo=ROOT, **extra):
    """A record entry for sources `paths` as they are now: HEAD, the uncommitted files among
    them, their digest, the date; `extra` (device, tools, workers...) added."""
    commit, _ = head(repo)
    entry = {"commit": commit,
             "uncommitted": changed_files(repo, commit, paths) if commit else [],
             "sources": sources_digest(repo, paths),
             "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    entry.update(extra)
    return entry


def update(kind, new_entries, repo=ROOT, copy_to=None):
    """Writes `new_entries` ({name: entry}) of `kind` into the record in build/gpu_check/ (and
    `copy_to`, a folder, when given); returns the whole record.

    The checkout's tracked record is left alone: writing it mid-run made the checkout dirty, so
    every bench section after the first sanitize stage recorded "dirty": true (2026-11-30). The
    session commits $OUT's copy over it; until then load() merges build/gpu_check/'s entries."""
    if kind not in KINDS:
        raise ValueError("kind must be one of %s, got %r" % (KINDS, kind))
    record = load(repo)
    record.setdefault(kind, {}).update(new_entries)
    record["about"] = ("The last clean GPU run per target: written by benchmarks/gpu_check.sh "
                       "(benchmarks/gpu/changed.py says how it is read)")
    paths = [os.path.join(repo, LOCAL_RECORD)]
    if copy_to:
        paths.append(os.path.join(copy_to, os.path.basename(RECORD)))
    for path in paths:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({k: record[k] for k in ("about",) + KINDS}, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    return record


def targets_of(kind):
    """The targets of `kind` and their sources, from the script that runs them."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if kind == "sanitize":
        from run_sanitize import SOURCES
    else:
        from bench_sections import FAIR_SOURCES as SOURCES
    return SOURCES


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=KINDS)
    p.add_argument("--repo", default=ROOT)
    args = p.parse_args(argv)
    selection = select(load(args.repo).get(args.kind, {}), targets_of(args.kind), args.repo)
    for name, s in selection.items():
        print("%-20s %-4s %s" % (name, "run" if s["run"] else "skip", s["why"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
