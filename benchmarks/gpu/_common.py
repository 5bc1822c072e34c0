"""What the scripts of benchmarks/gpu/ share: the checkout's prefetch on sys.path, the device
argument, process memory from /proc, and JSON written whole or not at all.

These scripts are what benchmarks/gpu_check.sh runs on a GPU; each also runs on the CPU
(``--device cpu``), so a syntax or import error shows up in CI, not on the one GPU run.
Standard library and torch only: the GPU image has no network to install anything.
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A script started as `python benchmarks/gpu/x.py` has benchmarks/gpu on sys.path, not the
# checkout: without this it would test whatever prefetch happens to be installed.
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def device_argument(parser, default="cuda"):
    parser.add_argument("--device", default=default,
                        help="cuda, cuda:N or cpu (default %s); cpu runs the same code without "
                             "CUDA, as CI does" % default)


def names_argument(parser, dest, choices, what):
    """A positional argument: one of `choices`, several joined by commas, or "all" (every one,
    in `choices`' order); the value parsed is a tuple in the order given."""

    def parse(text):
        names = tuple(n for n in text.split(",") if n)
        if names == ("all",):
            return tuple(choices)
        unknown = [n for n in names if n not in choices]
        if unknown or not names:
            raise argparse.ArgumentTypeError("unknown %s %s; choose from %s, or all"
                                             % (what, ",".join(unknown) or repr(text),
                                                ", ".join(choices)))
        return names

    parser.add_argument(dest, type=parse, metavar="|".join(choices) + "|all",
                        help="one %s, several joined by commas, or all" % what)


def resolve_device(name):
    """torch.device of `name`; a CUDA device that is not there is refused naming what is."""
    import torch

    device = torch.device(name)
    if device.type == "cuda":
        count = torch.cuda.device_count()
        index = device.index if device.index is not None else 0
        if index >= count:
            raise SystemExit("device %s asked for, but torch sees %d CUDA device(s) "
                             "(torch %s, CUDA %s)" % (name, count, torch.__version__,
                                                      torch.version.cuda))
        device = torch.device("cuda", index)
    return device


def proc_status(pid="self"):
    """VmRSS, VmHWM, VmLck and VmPin of a process in bytes (absent fields are left out)."""
    out = {}
    try:
        with open("/proc/%s/status" % pid) as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM", "VmLck", "VmPin"):
                    out[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def children(pid=None):
    """Every descendant pid of `pid` (default this process), from /proc."""
    pid = os.getpid() if pid is None else pid
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                # The command name is in parentheses and may hold spaces: split after the last ')'.
                fields = f.read().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def write_json(path, data):
    """Writes `data` to `path` through a temporary file, so a reader never sees half of it."""
    if not path:
        return
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=False, default=str)
        f.write("\n")
    os.replace(tmp, path)


def note(args, text):
    """One line for gpu_check.sh's stage note (``args.note_file``, the scripts' --note-file), when
    given."""
    if args.note_file:
        with open(args.note_file, "a") as f:
            f.write(text + "\n")


def parser(description):
    return argparse.ArgumentParser(description=description,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def kill_tree(pid, grace_s=10):
    """TERM to `pid` and every descendant, then KILL to whatever is left after `grace_s`.
    subprocess's own timeout kills only the child: torchrun's ranks or a bench's DataLoader
    workers would live on, holding the GPU, into the next stage."""
    import signal
    import time

    procs = children(pid) + [pid]
    for p in procs:
        try:
            os.kill(p, signal.SIGTERM)
        except OSError:
            pass
    end = time.monotonic() + grace_s
    while time.monotonic() < end and any(_alive(p) for p in procs):
        time.sleep(0.2)
    for p in procs:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def run_limited(cmd, limit_s, log_path=None, **kwargs):
    """Runs `cmd` for at most `limit_s` seconds: (returncode or "timeout", output text).
    With `log_path` the output goes to that file as it comes (and is read back at the end)."""
    import subprocess

    if log_path:
        os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
        out = open(log_path, "w")
    else:
        import tempfile

        out = tempfile.TemporaryFile("w+")
    try:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, **kwargs)
        try:
            rc = p.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            kill_tree(p.pid)
            p.wait()
            rc = "timeout"
        out.flush()
        if log_path:
            with open(log_path, errors="replace") as f:
                text = f.read()
        else:
            out.seek(0)
            text = out.read()
    finally:
        out.close()
    return rc, text


class Images:
    """A Dataset as users write them, made on the fly: (uint8 HWC image, label), with an int64
    mask between them when ``masks`` (not for ``ragged``: images of sizes of their own, as JPEG
    datasets have). Picklable, so DataLoader workers of any start method can use it."""

    def __init__(self, n, size, ragged=False, masks=False):
        self.n, self.size, self.ragged, self.masks = n, size, ragged, masks and not ragged

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch

        g = torch.Generator().manual_seed(100 + i)
        h = w = self.size
        if self.ragged:
            h, w = self.size + (i * 7) % 23, self.size + (i * 13) % 31
        image = torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=g)
        if self.masks:
            return image, torch.randint(0, 10, (h, w), generator=g), i
        return image, i


def require_built_for(device, script):
    """1 (the exit code) with a line saying so when ``device`` is CUDA and prefetch was built
    without CUDA, else None."""
    import prefetch

    if device.type == "cuda" and not prefetch.built_with_cuda():
        print("%s: prefetch was built without CUDA; build it on this machine first "
              "(bash benchmarks/gpu_check.sh build)" % script)
        return 1
    return None
