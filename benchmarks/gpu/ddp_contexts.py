"""Under torchrun, every rank's CUDA contexts are on its own device, and on no other.

A context costs about 0.5 GB of device memory; a library that touches CUDA from a thread where
device 0 is current (a new thread's default) gives every rank one on GPU 0 (FFCV PRs 224 and 190,
issue 24 item 2). Each rank here does what examples/ddp_train.py does (torch.cuda.set_device,
init_process_group), runs a Prefetcher over a DataLoader with a worker (the worker ring) and
FusedAugment, and both ArrayLoader residencies, on its device; then, still holding everything,
reports which devices its process and its DataLoader workers hold a context on: the driver's
primary-context state (torch._C._cuda_hasPrimaryContext, which creates none) and nvidia-smi's
compute processes (or NVML's) filtered by pid.

    python benchmarks/gpu/ddp_contexts.py --launch --device cuda --out DIR   # torchrun runs, checked
    python benchmarks/gpu/ddp_contexts.py --launch --device cpu --out DIR    # CI: gloo, 2 ranks

With two GPUs or more: 2 ranks with NCCL. With one: NCCL refuses two ranks on one device, so 1
rank with NCCL and 2 ranks with gloo on the same device (the per-rank check then only sees that
device). Exit 1 when a rank (or one of its workers) holds a context on another device, a rank
failed, or a run timed out.

    python benchmarks/gpu/ddp_contexts.py --launch --nccl2 --device cuda --out DIR

--nccl2 (gpu_check.sh's nccl stage): 2 ranks with NCCL whatever the GPUs, on one GPU both ranks
on it. NCCL since 2.5 refuses that at its first collective ("Duplicate GPU detected", an
ncclInvalidUsage: its topology search assumes a device per rank); the run is then recorded as
refused, with NCCL's words and version, and the exit status is 77 (nothing proven, nothing
failed); any other failure is 1.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import time

import _common  # noqa: F401  (puts the checkout's prefetch first on sys.path)
from _common import MEAN, STD, ROOT, children, run_limited, write_json

SKIP = 77  # gpu_check.sh's "nothing to run here" (its note says why)


def parse_args(argv=None):
    p = _common.parser(__doc__)
    _common.device_argument(p)
    p.add_argument("--launch", action="store_true",
                   help="start the torchrun runs this machine allows, then check their reports")
    p.add_argument("--backend", choices=("nccl", "gloo"), default=None,
                   help="a rank's process group (default nccl on CUDA, gloo on the CPU)")
    p.add_argument("--out", default="ddp-out", help="folder for rank<r>.json and ddp.json")
    p.add_argument("--timeout", type=float, default=120, help="seconds per torchrun run")
    p.add_argument("--check", action="store_true", help="only check the reports under --out")
    p.add_argument("--nccl2", action="store_true",
                   help="with --launch: one run of 2 NCCL ranks, on one GPU both on it (see above)")
    return p.parse_args(argv)


# -- one rank ------------------------------------------------------------------------------


def _smi_rows():
    """{pid: [gpu uuid, ...]} of every compute process nvidia-smi (or NVML) lists, and how."""
    rows = {}
    smi = shutil.which("nvidia-smi")
    if smi:
        p = subprocess.run([smi, "--query-compute-apps=pid,gpu_uuid,used_memory",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True,
                           timeout=30)
        if p.returncode == 0:
            for line in p.stdout.splitlines():
                parts = [x.strip() for x in line.split(",")]
                if len(parts) >= 2 and parts[0].isdigit():
                    rows.setdefault(int(parts[0]), []).append(
                        {"uuid": parts[1], "used_mib": parts[2] if len(parts) > 2 else None})
            return rows, "nvidia-smi"
    try:
        import pynvml

        pynvml.nvmlInit()
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                rows.setdefault(int(proc.pid), []).append(
                    {"uuid": uuid, "used_mib": (proc.usedGpuMemory or 0) // 2 ** 20})
        return rows, "nvml"
    except Exception as exc:  # noqa: BLE001 - neither tool: said in the report
        return {}, "none (no nvidia-smi; pynvml: %s)" % exc


def contexts_report(device_index):
    """What this process and its children hold, by CUDA device index."""
    import torch

    report = {"pid": os.getpid(), "children": children(), "own_device": device_index}
    if not torch.cuda.is_available():
        report.update(primary_contexts=[], smi_source="not run (no CUDA)", smi={})
        return report
    count = torch.cuda.device_count()
    has = getattr(torch._C, "_cuda_hasPrimaryContext", None)
    report["primary_contexts"] = [i for i in range(count) if has is not None and has(i)]
    if has is None:
        report["primary_contexts_note"] = "torch._C._cuda_hasPrimaryContext is missing"
    # The GPUs' UUIDs are mapped to device indices by the launcher: asking torch for them here
    # could itself touch the other devices.
    rows, source = _smi_rows()
    report["smi_source"] = source
    report["smi"] = {str(pid): rows[pid] for pid in [os.getpid()] + report["children"] if pid in rows}
    return report


def device_uuids():
    """{"GPU-<uuid>": CUDA device index} as torch numbers the devices (in the launcher)."""
    import torch

    out = {}
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            u = str(getattr(torch.cuda.get_device_properties(i), "uuid", ""))
            out[u if u.startswith("GPU-") else "GPU-" + u] = i
    return out


def rank_main(args):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    import prefetch

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    cuda = args.device.startswith("cuda")
    if cuda:
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)  # the one line examples/ddp_train.py asks of each rank
        device = torch.device("cuda", index)
    else:
        index, device = None, torch.device("cpu")
    backend = args.backend or ("nccl" if cuda else "gloo")
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    t0 = time.perf_counter()

    class Images:
        def __len__(self):
            return 64

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return torch.randint(0, 256, (32, 32, 3), dtype=torch.uint8, generator=g), i

    aug = prefetch.FusedAugment(MEAN, STD, crop=28, padding=2, seed=11)
    loader = DataLoader(Images(), batch_size=16, num_workers=1, persistent_workers=True,
                        collate_fn=prefetch.collate.samples)
    pf = prefetch.Prefetcher(loader, device=device, transform=aug)
    batches = 0
    for _ in range(2):
        for images, labels in pf:
            assert images.device == device, (images.device, device)
            batches += 1
    arrays = (torch.randint(0, 256, (64, 32, 32, 3), dtype=torch.uint8), torch.arange(64))
    loaders = [prefetch.ArrayLoader(arrays, 16, resident=r, device=device, transform=aug)
               for r in ("host", "device")]
    for al in loaders:
        for images, labels in al:
            assert images.device == device, (images.device, device)
            batches += 1
    total = torch.tensor([batches], device=device if backend == "nccl" else "cpu")
    dist.all_reduce(total)
    if cuda:
        torch.cuda.synchronize(device)
    # Everything still alive (Prefetcher, its worker, the loaders): the contexts as they are
    # while training.
    report = contexts_report(index)
    report.update(rank=rank, world_size=world, local_rank=local_rank, backend=backend,
                  device=str(device), batches=batches, all_reduced_batches=int(total.item()),
                  seconds=round(time.perf_counter() - t0, 2))
    write_json(os.path.join(args.out, "rank%d.json" % rank), report)
    dist.barrier()
    pf.close()
    for al in loaders:
        al.close()
    dist.destroy_process_group()
    return 0


# -- launching and checking ----------------------------------------------------------------


def problems_of(report):
    """Why a rank's report fails the check (empty when it passes)."""
    own = report.get("own_device")
    out = []
    if own is not None and "primary_contexts_note" not in report \
            and own not in report.get("primary_contexts", []):
        out.append("rank %s: no primary context seen even on its own device %s: the check sees "
                   "nothing and proves nothing" % (report.get("rank"), own))
    others = [i for i in report.get("primary_contexts", []) if i != own]
    if others:
        out.append("rank %s (device %s) holds a primary context on device(s) %s"
                   % (report.get("rank"), own, others))
    for pid, rows in report.get("smi", {}).items():
        is_worker = int(pid) != report.get("pid")
        for row in rows:
            if is_worker:
                out.append("rank %s: its DataLoader worker (pid %s) holds a CUDA context on "
                           "device %s (%s)" % (report.get("rank"), pid, row.get("device"), row["uuid"]))
            elif row.get("device") != own:
                out.append("rank %s (device %s): nvidia-smi lists its process on device %s (%s, "
                           "%s MiB)" % (report.get("rank"), own, row.get("device"), row["uuid"],
                                        row.get("used_mib")))
    return out


def check(out_dir, world, uuids=None):
    reports = []
    for path in sorted(glob.glob(os.path.join(out_dir, "rank*.json"))):
        with open(path) as f:
            reports.append(json.load(f))
    for r in reports:  # which device each nvidia-smi row is, in torch's numbering
        for rows in r.get("smi", {}).values():
            for row in rows:
                row.setdefault("device", (uuids or {}).get(row["uuid"]))
    problems = []
    if len(reports) != world:
        problems.append("%d rank report(s) in %s, expected %d" % (len(reports), out_dir, world))
    for r in reports:
        problems += problems_of(r)
        if r.get("all_reduced_batches") != sum(x.get("batches", 0) for x in reports):
            problems.append("rank %s: all_reduce gave %s batches, the reports add up to %s"
                            % (r.get("rank"), r.get("all_reduced_batches"),
                               sum(x.get("batches", 0) for x in reports)))
    return reports, problems


def plan(device, nccl2=False, gpus=None):
    """[(name, nproc, backend)] of the torchrun runs for `device` on this machine (`gpus`: how
    many torch sees, asked when None)."""
    if not device.startswith("cuda"):
        return [] if nccl2 else [("gloo_2ranks_cpu", 2, "gloo")]
    if gpus is None:
        import torch

        gpus = torch.cuda.device_count()
    if gpus >= 2:
        return [("nccl_2ranks", 2, "nccl")]
    if nccl2:
        return [("nccl_2ranks_one_gpu", 2, "nccl")]
    return [("nccl_1rank", 1, "nccl"), ("gloo_2ranks_one_gpu", 2, "gloo")]


def nccl_refusal(text):
    """NCCL's refusal of two ranks on one device, as its log words it (with the NCCL version
    where the log has it), or None when the log shows no such refusal."""
    import re

    found = re.search(r"Duplicate GPU detected[^\n]*", text)
    if not found:
        return None
    version = re.search(r"NCCL version ([\d.]+\S*)", text)
    return found.group(0).strip() + (" (NCCL %s)" % version.group(1) if version else "")


def launch(args):
    runs, ok, refused = [], True, []
    uuids = device_uuids() if args.device.startswith("cuda") else {}
    runs_planned = plan(args.device, args.nccl2)
    if not runs_planned:
        print("ddp: --nccl2 needs CUDA (NCCL runs on GPUs only): nothing to run on %s" % args.device)
        write_json(os.path.join(args.out, "ddp.json"), {"ok": True, "runs": [],
                                                        "skipped": "NCCL needs CUDA"})
        return SKIP
    for name, nproc, backend in runs_planned:
        out = os.path.join(args.out, name)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=%d" % nproc, os.path.abspath(__file__), "--device", args.device,
               "--backend", backend, "--out", out]
        env = dict(os.environ, OMP_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
        print("ddp: %s: %s" % (name, " ".join(cmd[1:])), flush=True)
        t0 = time.perf_counter()
        rc, output = run_limited(cmd, args.timeout, os.path.join(out, "torchrun.log"), env=env)
        if rc == "timeout":
            rc = "timeout after %.0f s" % args.timeout
        reports, problems = check(out, nproc, uuids)
        refusal = nccl_refusal(output) if backend == "nccl" and rc != 0 else None
        if refusal:
            # Not prefetch's failure, and nothing proven: NCCL's rule, said as NCCL says it.
            refused.append(name)
            problems = []
            print("ddp: %s: refused by NCCL: %s" % (name, refusal), flush=True)
        elif rc != 0:
            problems.insert(0, "torchrun exited with %s (log: %s)" % (rc, os.path.join(out, "torchrun.log")))
            print(output[-3000:], flush=True)
        run = {"name": name, "nproc": nproc, "backend": backend, "returncode": rc,
               "refused_by_nccl": refusal,
               "seconds": round(time.perf_counter() - t0, 1), "ok": not problems,
               "problems": problems,
               "ranks": [{k: r.get(k) for k in ("rank", "device", "own_device", "primary_contexts",
                                                "smi", "smi_source", "batches", "seconds")}
                         for r in reports]}
        runs.append(run)
        ok = ok and run["ok"]
        for r in run["ranks"]:
            print("  rank %s on %s: primary contexts on %s; %s: %s" % (
                r["rank"], r["device"], r["primary_contexts"], r["smi_source"],
                {pid: [row.get("device") for row in rows] for pid, rows in (r["smi"] or {}).items()}
                or "no process listed"), flush=True)
        print("ddp: %s %s in %.1f s%s" % (name, "ok" if run["ok"] else "FAILED", run["seconds"],
                                          "".join("\n  " + p for p in problems)), flush=True)
        write_json(os.path.join(args.out, "ddp.json"), {"ok": ok, "runs": runs})
    if not ok:
        return 1
    return SKIP if refused and len(refused) == len(runs) else 0


def main(argv=None):
    args = parse_args(argv)
    if args.check:
        reports, problems = check(args.out, len(glob.glob(os.path.join(args.out, "rank*.json"))),
                                  device_uuids() if args.device.startswith("cuda") else {})
        print("\n".join(problems) or "ok: %d rank(s), each on its own device only" % len(reports))
        return 1 if problems else 0
    if args.launch:
        return launch(args)
    if "LOCAL_RANK" not in os.environ:
        raise SystemExit("ddp_contexts.py: run under torchrun, or pass --launch")
    return rank_main(args)


if __name__ == "__main__":
    sys.exit(main())
