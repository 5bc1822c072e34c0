"""benchmarks/gpu_check.sh, the one GPU run we get, proven on the CPU: its CPU mode runs the same
preflight, stage order, time limits and result files, and each of its scripts' CPU paths; the
rules its stages judge by (growth, contexts, sanitizer errors, the README table, the merge of
bench sections) are checked here on made-up inputs."""
import ast
import importlib
import json
import os
import subprocess
import sys
import tarfile

import pytest

from ..helpers import ROOT

SCRIPT = os.path.join(ROOT, "benchmarks", "gpu_check.sh")
GPU_DIR = os.path.join(ROOT, "benchmarks", "gpu")


def gpu_module(name):
    if GPU_DIR not in sys.path:
        sys.path.insert(0, GPU_DIR)
    return importlib.import_module(name)


def run_check(tmp_path, *args, env=None, timeout=150):
    out = tmp_path / "out"
    # Not the settings of a gpu_check run this suite may itself be part of (its suite stage).
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK_")}
    # The stages run this interpreter (the CUDA-torch venv's under scripts/check_cuda_build.sh,
    # whose build the system python3 cannot load).
    full_env.update(OUT=str(out), OMP_NUM_THREADS="1", PYTHON=sys.executable, **(env or {}))
    p = subprocess.run(["bash", SCRIPT] + list(args), capture_output=True, text=True,
                       timeout=timeout, env=full_env, cwd=str(tmp_path))
    return p, out


def test_cpu_mode_runs_every_stage_in_order_and_records_each_as_it_finishes(tmp_path):
    p, out = run_check(tmp_path, "--cpu", "build,sanitize,ddp,suite", env={"GPU_CHECK_SELFTEST": "1"})
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    stages = {s["stage"]: s for s in summary["stages"]}
    assert [s["stage"] for s in summary["stages"]] == ["preflight", "selftest", "build", "sanitize",
                                                      "ddp", "suite"]
    assert stages["preflight"]["status"] == "ok"
    # The self-test sleeps past its 2-second limit: a timeout, and the stages after it still ran.
    assert stages["selftest"]["status"] == "timeout" and stages["selftest"]["limit_s"] == 2
    assert stages["selftest"]["seconds"] < 15
    for name in ("build", "suite"):
        assert stages[name]["status"] == "skipped" and "no GPU" in stages[name]["note"]
    for name in ("sanitize", "ddp"):
        assert stages[name]["status"] == "ok", stages[name]
        assert "no GPU" in stages[name]["note"]
        assert (out / "logs" / (name + ".log")).exists()
        assert json.loads((out / "logs" / (name + ".status.json")).read_text())["status"] == "ok"
    assert [r["status"] for r in stages["sanitize"]["detail"]["runs"]] == ["ok"] * 4
    assert stages["ddp"]["detail"]["ok"] and stages["ddp"]["detail"]["runs"][0]["nproc"] == 2
    assert summary["result"] == "ok" and summary["not_ok"] == []
    assert summary["preflight"]["mode"] == "cpu" and summary["preflight"]["python"]["version"]
    assert "mode: cpu" in (out / "preflight.txt").read_text()
    assert "result: ok" in p.stdout


def test_budget_skips_what_no_longer_fits_and_pack_keeps_out_few_files(tmp_path):
    p, out = run_check(tmp_path, "--cpu", "--pack", "--budget", "30", "memory")
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert sorted(os.listdir(out)) == ["logs.tar.gz", "preflight.txt", "summary.json"]
    summary = json.loads((out / "summary.json").read_text())
    stages = {s["stage"]: s for s in summary["stages"]}
    assert "cut to" in stages["preflight"]["note"]
    assert stages["memory"]["status"] == "skipped" and "not started" in stages["memory"]["note"]
    assert summary["budget_s"] == 30 and summary["packed_logs"] is True
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = {os.path.normpath(n) for n in tar.getnames()}
    assert {"preflight.log", "preflight.json", "memory.status.json"} <= names


@pytest.mark.parametrize("args,message", [(["nope"], "unknown stage 'nope'"),
                                          (["--budget", "soon"], "whole seconds"),
                                          (["--frobnicate"], "unknown option")])
def test_bad_arguments_are_refused_naming_them(tmp_path, args, message):
    p, out = run_check(tmp_path, *args, timeout=30)
    assert p.returncode == 2 and message in p.stderr, p.stderr
    assert not (out / "summary.json").exists()


def test_list_shows_every_stage_with_its_limit_and_the_whole_fits_in_25_minutes():
    p = subprocess.run(["bash", SCRIPT, "--list"], capture_output=True, text=True, timeout=30)
    limits = dict(line.split()[:2] for line in p.stdout.splitlines())
    assert list(limits) == ["preflight", "selftest", "build", "tests", "sanitize", "memory", "ddp",
                            "bench", "profile", "suite"]
    default = ["preflight", "build", "tests", "sanitize", "memory", "ddp", "bench"]
    assert sum(int(limits[s]) for s in default) < 25 * 60
    # The recommended device calls (the script's header): each under 10 minutes.
    calls = [["build", "tests"], ["build", "sanitize", "memory", "ddp"], ["build", "bench"],
             ["build", "profile", "suite"]]
    header = open(SCRIPT).read()
    for call in calls:
        assert "--budget 570 %s" % ",".join(call) in header
        # With the build a no-op on the warm machine:
        assert int(limits["preflight"]) + sum(int(limits[s]) for s in call[1:]) < 600


def test_the_tests_stage_names_its_failed_and_skipped_tests(tmp_path):
    # junit_note, the tests stage's report, on a junit file of one test of each outcome: what a GPU
    # run did not check (skipped, and why) is named as well as what failed.
    (tmp_path / "tests.xml").write_text(
        '<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="3">'
        '<testcase classname="tests.ops.test_a" name="test_ran"/>'
        '<testcase classname="tests.ops.test_a" name="test_skipped">'
        '<skipped type="pytest.skip" message="needs two GPUs">why</skipped></testcase>'
        '<testcase classname="tests.ops.test_b" name="test_failed"><failure message="boom"/></testcase>'
        '</testsuite></testsuites>')
    script = ('eval "$(sed -n \'/^junit_note() {/,/^}/p\' "$SCRIPT")"; junit_note "$LOGS/tests.xml"')
    env = dict(os.environ, SCRIPT=SCRIPT, LOGS=str(tmp_path), PY=sys.executable, GPU_CHECK_LOGS=str(tmp_path),
               GPU_CHECK_STAGE="tests")
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    detail = json.loads((tmp_path / "tests.detail.json").read_text())
    assert (detail["passed"], detail["failures"], detail["skipped"]) == (1, 1, 1)
    assert detail["failed_tests"] == ["tests.ops.test_b::test_failed"]
    assert detail["skipped_tests"] == ["tests.ops.test_a::test_skipped: needs two GPUs"]
    assert (tmp_path / "tests.note").read_text() == "1 passed, 1 failed, 0 errors, 1 skipped\n"


def test_overall_result_excuses_only_the_selftests_timeout():
    record = gpu_module("record")
    stage = lambda name, status: {"stage": name, "status": status}  # noqa: E731
    assert record.overall([stage("selftest", "timeout"), stage("build", "skipped"),
                           stage("tests", "ok")]) == ("ok", [])
    assert record.overall([stage("tests", "timeout"), stage("memory", "failed")]) == \
        ("failed", ["tests", "memory"])


def test_memory_growth_compares_the_first_and_last_five_epochs():
    memory = gpu_module("memory")
    assert memory.growth([10] * 20) == 0
    assert memory.growth([10, 12, 11, 10, 9] + [10] * 15) == -2  # warm-up noise does not count
    assert memory.growth(list(range(20))) == 15                   # one step per epoch: a leak
    assert memory.growth([None, 1, 2]) is None


def test_reserved_device_memory_may_step_once_but_not_keep_growing():
    # The worker ring's scenario on the H200: one more allocator segment at the fourth measured
    # epoch, allocated bytes flat: no leak. Growth that goes on in the last ten epochs still is.
    memory = gpu_module("memory")
    MIB = memory.MIB
    step = [206 * MIB] * 5 + [222 * MIB] * 15
    creep = [(200 + 2 * e) * MIB for e in range(20)]
    assert memory.judged_growth("cuda_reserved", step) == 0
    assert memory.judged_growth("cuda_allocated", step) == 16 * MIB  # allocated: the whole run
    assert memory.judged_growth("cuda_reserved", creep) == 10 * MIB > memory.TOLERANCE["cuda_reserved"]
    assert memory.settled_growth(list(range(7))) == memory.growth(list(range(7)))  # under ten epochs


def test_ddp_check_fails_a_context_off_the_ranks_device():
    ddp = gpu_module("ddp_contexts")
    clean = {"rank": 1, "pid": 10, "own_device": 1, "primary_contexts": [1],
             "smi": {"10": [{"uuid": "GPU-b", "device": 1, "used_mib": "500"}]}}
    assert ddp.problems_of(clean) == []
    on_zero = dict(clean, primary_contexts=[0, 1])
    assert ddp.problems_of(on_zero) == ["rank 1 (device 1) holds a primary context on device(s) [0]"]
    listed = dict(clean, smi={"10": [{"uuid": "GPU-a", "device": 0, "used_mib": "480"}]})
    assert "nvidia-smi lists its process on device 0 (GPU-a, 480 MiB)" in ddp.problems_of(listed)[0]
    worker = dict(clean, smi={"11": [{"uuid": "GPU-b", "device": 1, "used_mib": "300"}]})
    assert "its DataLoader worker (pid 11) holds a CUDA context" in ddp.problems_of(worker)[0]
    blind = dict(clean, primary_contexts=[])
    assert "proves nothing" in ddp.problems_of(blind)[0]
    plan = ddp.plan("cpu")
    assert plan == [("gloo_2ranks_cpu", 2, "gloo")]


def test_sanitize_plan_runs_memcheck_over_everything_first():
    rs = gpu_module("run_sanitize")
    runs = rs.plan()
    k = len(rs.OPS) + len(rs.PATHS)
    assert [r[0] for r in runs[:k]] == ["memcheck"] * k
    assert {r[2] for r in runs[:k]} == set(rs.OPS) | set(rs.PATHS)
    assert set(rs.OPS) == set(gpu_module("sanitize_ops").OPS)  # every op the script has
    assert [r[0] for r in runs[k:2 * k]] == ["racecheck"] * k
    assert {r[0] for r in runs[2 * k:]} == {"synccheck", "initcheck"}
    assert ("initcheck", "sanitize_ops.py", "decode") not in runs  # nvJPEG's own reads
    ring = rs.command("compute-sanitizer", "memcheck", "sanitize_copy.py", "worker_ring")
    other = rs.command("compute-sanitizer", "memcheck", "sanitize_copy.py", "prefetcher")
    assert "--target-processes" in ring and "--target-processes" not in other
    assert "--error-exitcode=1" in other and other[-2:] == ["--device", "cuda"]
    assert rs.errors_in("...\n========= ERROR SUMMARY: 3 errors\n") == 3
    assert rs.errors_in("Traceback ...") is None


def _gpu_results():
    return {
        "device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "prefetch": "0.1.0",
        "python": "3.12.3", "date": "2026-11-30T10:00:00+00:00",
        "config": {"sections": ["h2d", "e2e", "ops"], "batch_sizes": [64, 256], "image_size": 224},
        "metrics": {"h2d_gbps": 24.5, "e2e_vs_timm": 1.3},
        "details": {
            "h2d": {"batch_mib": 36.8, "repeats": 3, "h2d_gbps": 24.5, "pin_memory_gbps": 9.1,
                    "h2d_raw_gbps": 25.2, "h2d_fraction_of_raw": 0.97, "h2d_vs_pin_memory": 2.69},
            "h2d_zero_copy": [{"dtype": "float16", "channels_last": False, "zero_copy_s": 0.002,
                               "copy_then_op_s": 0.003, "zero_copy_vs_copy_then_op": 1.5}],
            "e2e": {"config": {"workers": 2, "shapes": {"small_cnn": {"batch_size": 256, "image_size": 224}}},
                    "results": {"small_cnn": {
                        "baseline": {"img_per_s": 1000.0, "wait_fraction": 0.4},
                        "timm": {"img_per_s": 2000.0, "wait_fraction": 0.1},
                        "prefetch": {"img_per_s": 2600.0, "wait_fraction": 0.01},
                        "ceiling": {"img_per_s": 3000.0, "wait_fraction": 0.0}}},
                    "skipped": {}},
            "ops": [{"dtype": "float32"}],  # a row without its figures
        },
        "skipped": {"arrays": "not asked"}, "failed": {"workers": "timed out after 120 s"},
        "verdict": "prefetch was faster ...",
    }


def test_readme_table_renders_the_gpu_rows_and_says_what_did_not_run():
    table = gpu_module("readme_table").render(_gpu_results())
    assert "NVIDIA H100 80GB HBM3, torch 2.11.0+cu130" in table
    assert "| 24.5 | 9.1 | 25.2 | 0.97 | 2.69 |" in table
    assert "| float16 | 2.000 | 3.000 | 1.50 |" in table
    assert "| small cnn | 256 × 224² | 1000 | 2000 | 2600 | 3000 | 2.60 | 1.30 | 1.0% |" in table
    assert "**ops**: its table could not be read out of results.json (KeyError" in table
    assert "**arrays**: skipped: not asked" in table
    assert "**workers**: failed: timed out after 120 s" in table
    assert "| `e2e_vs_timm` | 1.3 |" in table and "Verdict: prefetch was faster" in table


def test_bench_sections_merge_keeps_every_finished_section_and_names_the_failed_one():
    bs = gpu_module("bench_sections")
    part = lambda name, metric: {  # noqa: E731
        "device": "gpu", "torch": "t", "prefetch": "p", "python": "3", "date": "d",
        "config": {"sections": [name], "quick": False}, "metrics": {metric: 1.0},
        "details": {name: [name]}, "skipped": {}}
    runs = {"h2d": {"status": "ok", "why": ""}, "ops": {"status": "ok", "why": ""},
            "e2e": {"status": "timeout", "why": "timed out after 100 s (log: e2e.log)"}}
    merged = bs.merge([part("h2d", "h2d_gbps"), part("ops", "ops_gbps")], runs, "cuda")
    assert merged["config"]["sections"] == ["h2d", "ops"]
    assert merged["metrics"] == {"h2d_gbps": 1.0, "ops_gbps": 1.0}
    assert set(merged["details"]) == {"h2d", "ops"}
    assert merged["failed"] == {"e2e": "timed out after 100 s (log: e2e.log)"}
    assert merged["section_runs"] is runs and merged["verdict"]
    assert bs.merge([], {}, "cpu")["config"] == {"sections": []}


@pytest.mark.parametrize("module", ["memory", "sanitize_ops", "sanitize_copy", "ddp_contexts",
                                    "bench_sections", "run_sanitize", "preflight", "readme_table",
                                    "record"])
def test_every_gpu_script_parses_its_arguments(module, capsys):
    with pytest.raises(SystemExit) as exc:
        gpu_module(module).main(["--help"])
    assert exc.value.code == 0
    assert "usage:" in capsys.readouterr().out


def _calls(node):
    return {c.func.id if isinstance(c.func, ast.Name) else c.func.attr
            for c in ast.walk(node) if isinstance(c, ast.Call)
            and isinstance(c.func, (ast.Name, ast.Attribute))}


def test_every_test_that_needs_cuda_carries_the_cuda_marker():
    """gpu_check's tests stage selects `-m cuda`: a CUDA test without the marker would never run
    on the GPU (FFCV's test_memory_leak). A test needs CUDA when it calls require_cuda(), itself
    or through a helper of its module; the `device` fixture marks its own CUDA case."""
    missing = []
    names = sorted(os.path.relpath(os.path.join(folder, name), os.path.join(ROOT, "tests"))
                   for folder, _, files in os.walk(os.path.join(ROOT, "tests"))
                   for name in files if name.startswith("test_") and name.endswith(".py"))
    assert "ops/test_augment.py" in names  # the walk reaches the folders, where the CUDA tests are
    for name in names:
        tree = ast.parse(open(os.path.join(ROOT, "tests", name)).read())
        module_marked = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark"
                                                              for t in n.targets)
                            and "cuda" in ast.unparse(n.value) for n in tree.body)
        functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
        needing = {"require_cuda"}
        for f in functions:  # helpers that call require_cuda (one level is what the suite has)
            if not f.name.startswith("test_") and "require_cuda" in _calls(f):
                needing.add(f.name)
        for f in functions:
            if not f.name.startswith("test_") or not (needing & _calls(f)):
                continue
            if not (module_marked or any("mark.cuda" in ast.unparse(d) for d in f.decorator_list)):
                missing.append("%s::%s" % (name, f.name))
    assert not missing, "add @pytest.mark.cuda to: %s" % ", ".join(missing)


FAKE_SANITIZER = """#!%s
# compute-sanitizer's stand-in: runs the script it was given on the CPU, then reports as the
# real one does; FAKE_FAIL=<target> makes that target report errors.
import os, subprocess, sys
args = sys.argv[1:]
i = next(k for k, a in enumerate(args) if a.endswith(".py"))
cmd = [args[i - 1], args[i], args[i + 1], "--device", "cpu"]
rc = subprocess.call(cmd)
bad = os.environ.get("FAKE_FAIL") == args[i + 1]
print("========= ERROR SUMMARY: %%d errors" %% (2 if bad else 0), flush=True)
sys.exit(1 if bad or rc else 0)
"""


def test_sanitize_runner_records_each_run_and_fails_on_reported_errors(tmp_path):
    fake = tmp_path / "bin" / "compute-sanitizer"
    fake.parent.mkdir()
    fake.write_text(FAKE_SANITIZER % sys.executable)
    fake.chmod(0o755)
    env = dict(os.environ, PATH="%s:%s" % (fake.parent, os.environ["PATH"]), FAKE_FAIL="flip_crop",
               PYTHONPATH=ROOT)
    logs = tmp_path / "logs"
    p = subprocess.run([sys.executable, os.path.join(GPU_DIR, "run_sanitize.py"), "--logs", str(logs),
                        "--tools", "synccheck", "--jobs", "2"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode == 1, p.stdout + p.stderr
    runs = json.loads((logs / "sanitize.json").read_text())["runs"]
    assert [r["run"] for r in runs] == ["synccheck-" + op for op in
                                        ("normalize_flip", "flip_crop", "resized_crop", "affine_warp", "sharpness",
                                         "lookup", "color_jitter", "histograms", "decode")]
    by = {r["run"]: r for r in runs}
    assert by["synccheck-flip_crop"]["status"] == "failed" and by["synccheck-flip_crop"]["errors"] == 2
    assert all(by[n]["status"] == "ok" and by[n]["errors"] == 0 for n in by if "flip_crop" not in n)
    assert "ERROR SUMMARY: 2 errors" in (logs / "synccheck-flip_crop.log").read_text()
    # No budget left: nothing started, nothing failed.
    p = subprocess.run([sys.executable, os.path.join(GPU_DIR, "run_sanitize.py"), "--logs", str(logs),
                        "--tools", "synccheck", "--budget", "5"], capture_output=True, text=True,
                       timeout=60, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    runs = json.loads((logs / "sanitize.json").read_text())["runs"]
    assert {r["status"] for r in runs} == {"not started (budget)"}
