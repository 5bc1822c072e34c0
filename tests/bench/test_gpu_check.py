"""benchmarks/gpu_check.sh, the one GPU run we get, proven on the CPU: its CPU mode runs the same
preflight, stage order, time limits and result files, and each of its scripts' CPU paths; the
rules its stages judge by (growth, contexts, sanitizer errors, the README table, the merge of
bench sections) are checked here on made-up inputs."""
import ast
import glob
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


def head_of(repo):
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    assert len(commit) == 40
    return commit


def test_cpu_mode_runs_every_stage_in_order_and_records_each_as_it_finishes(tmp_path):
    p, out = run_check(tmp_path, "--cpu", "build,sanitize,ddp,suite", env={"GPU_CHECK_SELFTEST": "1"})
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    stages = {s["stage"]: s for s in summary["stages"]}
    # Each result carries the commit it measured, dirty or not, as the stage ended.
    commit = head_of(ROOT)
    for s in summary["stages"]:
        assert s["commit"] == commit and isinstance(s["uncommitted_files"], int), s
        assert json.loads((out / "logs" / (s["stage"] + ".status.json")).read_text())["commit"] == commit
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
    assert list(limits) == ["preflight", "selftest", "build", "tests", "sanitize", "sanitize_changed",
                            "memory", "ddp", "bench", "bench_fair", "nccl", "profile", "suite"]
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
                                    "record", "changed"])
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
# compute-sanitizer's stand-in: runs the script it was given on the CPU (not with FAKE_NO_RUN=1),
# then reports as the real one does; FAKE_FAIL=<target> makes that target report errors.
import os, subprocess, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("fake compute-sanitizer 0.1")
    sys.exit(0)
i = next(k for k, a in enumerate(args) if a.endswith(".py"))
cmd = [args[i - 1], args[i], args[i + 1], "--device", "cpu"]
rc = 0 if os.environ.get("FAKE_NO_RUN") == "1" else subprocess.call(cmd)
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
                                        ("normalize_flip", "flip_crop", "resized_crop", "affine_warp", "pil_affine", "sharpness",
                                         "gaussian_blur", "lookup", "color_jitter", "histograms", "decode")]
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


# -- the focused plan: what changed, first, in one device call ------------------

def plan_figures():
    p = subprocess.run(["bash", SCRIPT, "--plan", "focused", "--list"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    stages = [line.split() for line in lines if line.startswith("stage ")]
    figures = {line.split()[0]: int(line.split()[1]) for line in lines if len(line.split()) == 2}
    return lines[0], [(f[1], f[3], int(f[5])) for f in stages], figures


def test_focused_plan_runs_what_changed_in_order_and_fits_the_lease_in_one_call():
    head, stages, f = plan_figures()
    assert head == "plan focused build,tests,sanitize_changed,bench_fair"
    assert [s[0] for s in stages] == ["preflight", "build", "tests", "sanitize_changed", "bench_fair"]
    # The tests stage has no limit of its own that could cut it short (the last one ran 82 of 290
    # tests in its 60 s): all that is left of the budget, and a limit per test.
    limits = {name: limit for name, limit, _ in stages}
    assert limits["tests"] == "rest" and 0 < f["per_test_limit_s"] <= 120
    # The expected seconds (the H200's, in the script) fit the budget with the recording reserve,
    expected = sum(e for _, _, e in stages)
    assert f["expected_s"] == expected and expected + f["reserve_s"] <= f["budget_s"]
    # the script ends inside the device call (a stage's kill-after 10 s, the summary, the pack),
    assert f["budget_s"] + 25 <= f["call_timeout_s"] <= 600  # the device tool's per-call limit
    # and the call, with the machine's start, the transfers and the idle time before the machine
    # goes back, fits the lease.
    assert f["device_s"] == f["startup_s"] + f["transfer_s"] + f["call_timeout_s"]
    assert f["left_after_s"] == f["lease_s"] - f["device_s"] - f["warm_s"] >= 0
    # One call, because a second one is cold (a fresh machine, the build again): what the first
    # leaves would give it no time for a stage, or not start it at all. The plan takes the time
    # a second call could have had into the first.
    assert (f["left_after_s"] < f["min_start_s"]
            or f["left_after_s"] - f["second_call_overhead_s"] < 60)
    assert f["second_call_overhead_s"] >= f["startup_s"] // 2 + 100  # a start and a build at least
    # The header's device call is exactly this one, and it says to give the machine back.
    header = open(SCRIPT).read()
    assert ("command: bash benchmarks/gpu_check.sh --pack --plan focused        timeout_s: %d"
            % f["call_timeout_s"]) in header
    assert "--budget %d unless" % f["budget_s"] in header
    assert "Then give_back at once" in header


def test_focused_plan_in_cpu_mode_runs_each_stages_cpu_path_and_records_the_commit(tmp_path):
    # One fair section's CPU path is enough here (CI's gpu_check --cpu all runs the four).
    p, out = run_check(tmp_path, "--cpu", "--plan", "focused", timeout=600,
                       env={"GPU_CHECK_FAIR_SECTIONS": "recipes"})
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["plan"] == "focused" and summary["budget_s"] == plan_figures()[2]["budget_s"]
    stages = {s["stage"]: s for s in summary["stages"]}
    assert list(stages) == ["preflight", "build", "tests", "sanitize_changed", "bench_fair"]
    commit = head_of(ROOT)
    assert {s["commit"] for s in summary["stages"]} == {commit}
    for name in ("build",):
        assert stages[name]["status"] == "skipped" and "no GPU" in stages[name]["note"], stages[name]
    assert "all that is left of --budget" in stages["tests"]["note"]
    assert "no GPU: collected" in stages["tests"]["note"]
    collected = int(stages["tests"]["note"].split("no GPU: collected ")[1].split()[0])
    assert collected > 100  # the CUDA tests (290 when this was written), counted by pytest_limits
    for name in ("sanitize_changed", "bench_fair"):
        assert stages[name]["status"] == "ok" and "no GPU" in stages[name]["note"], stages[name]
    selection = stages["sanitize_changed"]["detail"]["selection"]
    assert set(selection) == set(gpu_module("run_sanitize").SOURCES)
    ran = {r["run"] for r in stages["sanitize_changed"]["detail"]["runs"]}
    if any(s["run"] for s in selection.values()):
        assert ran, stages["sanitize_changed"]
    assert set(stages["bench_fair"]["detail"]["fair_selection"]) == {"h2d", "e2e", "recipes", "workers"}
    # Only the asked section runs, and only when it has new code or no fair figure yet (the
    # record's state at the commit tested decides which).
    fair = stages["bench_fair"]["detail"]
    runs = set(fair.get("section_runs", {}))
    assert runs == ({"recipes"} if fair["fair_selection"]["recipes"]["run"] else set()), fair
    # The CPU mode records nothing as clean or fair: no sanitizer ran, no GPU measured.
    assert not (out / "gpu_clean_runs.json").exists()


GIT_ENV = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")


class Repo:
    """A temporary git repository with files written and committed on demand."""

    def __init__(self, path):
        self.path = path
        path.mkdir()
        self.git("init", "-q")

    def git(self, *args):
        p = subprocess.run(["git", "-C", str(self.path)] + list(args), capture_output=True,
                           text=True, env=GIT_ENV)
        assert p.returncode == 0, p.stderr
        return p.stdout.strip()

    def write(self, name, text):
        f = self.path / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)

    def commit(self, message):
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")


def test_changed_selection_against_a_known_history(tmp_path):
    changed = gpu_module("changed")
    repo = Repo(tmp_path / "repo")
    for name in ("csrc/kernels/a/a.cu", "csrc/kernels/a/a_cpu.cpp", "csrc/kernels/b/b.cu",
                 "csrc/kernels/common/x.h"):
        repo.write(name, "// 1\n")
    c1 = repo.commit("one")
    cpu_only = ":(exclude,glob)csrc/kernels/**/*_cpu*"
    targets = {"a": ["csrc/kernels/a", "csrc/kernels/common", cpu_only],
               "b": ["csrc/kernels/b", "csrc/kernels/common", cpu_only], "c": ["csrc/kernels/c"]}
    r = str(repo.path)
    # A record without a digest (as the seeded one): git alone decides.
    entries = {"a": {"commit": c1}, "b": {"commit": c1}}

    def runs():
        return {n: s["files"] for n, s in changed.select(entries, targets, r).items() if s["run"]}

    assert runs() == {"c": []}
    assert changed.select(entries, targets, r)["a"]["why"] == "unchanged since %s" % c1[:10]
    assert changed.select(entries, targets, r)["c"]["why"] == "no clean run recorded"
    # A committed change to a's device code; one to its CPU build is not the sanitizer's.
    repo.write("csrc/kernels/a/a.cu", "// 2\n")
    repo.write("csrc/kernels/a/a_cpu.cpp", "// 2\n")
    repo.commit("two")
    assert runs() == {"a": ["csrc/kernels/a/a.cu"], "c": []}
    # An uncommitted change to the shared code, and an untracked new file of b's.
    repo.write("csrc/kernels/common/x.h", "// 3\n")
    repo.write("csrc/kernels/b/new.cuh", "// new\n")
    assert runs() == {"a": ["csrc/kernels/a/a.cu", "csrc/kernels/common/x.h"],
                      "b": ["csrc/kernels/b/new.cuh", "csrc/kernels/common/x.h"], "c": []}
    assert "2 file(s) changed since %s" % c1[:10] in changed.select(entries, targets, r)["b"]["why"]
    # A commit this history does not have: run, saying so.
    entries["b"] = {"commit": "0" * 40}
    assert "is not in this history" in changed.select(entries, targets, r)["b"]["why"]


def test_a_clean_run_on_uncommitted_sources_stands_once_they_are_committed(tmp_path):
    changed = gpu_module("changed")
    repo = Repo(tmp_path / "repo")
    repo.write("k/a.cu", "// 1\n")
    c1 = repo.commit("one")
    r = str(repo.path)
    repo.write("k/a.cu", "// 2, sanitized before it was committed\n")
    entry = changed.entry_for(["k"], r, tools=["memcheck"])
    assert entry["commit"] == c1 and entry["uncommitted"] == ["k/a.cu"] and entry["tools"] == ["memcheck"]
    assert not changed.select({"a": entry}, {"a": ["k"]}, r)["a"]["run"]
    repo.commit("two")  # the same bytes, committed: git sees a change since c1, the digest none
    sel = changed.select({"a": entry}, {"a": ["k"]}, r)["a"]
    assert not sel["run"] and sel["why"] == "the same sources as the clean run at %s" % c1[:10]
    repo.write("k/a.cu", "// 1\n")  # back to c1's bytes, which were never sanitized
    repo.commit("three")
    sel = changed.select({"a": entry}, {"a": ["k"]}, r)["a"]
    assert sel["run"] and "had uncommitted changes (k/a.cu)" in sel["why"]


def test_the_record_is_written_outside_the_checkout_and_the_newer_entry_wins(tmp_path):
    changed = gpu_module("changed")
    repo = Repo(tmp_path / "repo")
    repo.write("k/a.cu", "// 1\n")
    repo.write(".gitignore", "build/\n")  # as this repository's
    repo.commit("one")
    r = str(repo.path)
    copy = tmp_path / "out"
    copy.mkdir()
    old = {"commit": "1" * 40, "date": "2026-11-01T00:00:00+00:00"}
    changed.update("sanitize", {"a": old, "b": old}, r)
    new = changed.entry_for(["k"], r)
    changed.update("sanitize", {"a": new}, r, copy_to=str(copy))
    for path in (repo.path / changed.LOCAL_RECORD, copy / "gpu_clean_runs.json"):
        data = json.loads(path.read_text())
        assert data["sanitize"] == {"a": new, "b": old} and data["bench_fair"] == {}
    # The tracked record is not touched, so the sections measured after a stage see a clean
    # checkout (build/ is ignored by git).
    assert not (repo.path / changed.RECORD).exists() and changed.head(r)[1] == 0
    # The device's copy of the tree brings the older record back; build/gpu_check/ keeps the newer.
    (repo.path / changed.RECORD).parent.mkdir(parents=True)
    (repo.path / changed.RECORD).write_text(json.dumps({"sanitize": {"a": old}}))
    assert changed.load(r)["sanitize"]["a"] == new
    with pytest.raises(ValueError, match="kind must be one of"):
        changed.update("nope", {}, r)


def test_changed_selection_reads_this_repositorys_history():
    changed = gpu_module("changed")
    rs = gpu_module("run_sanitize")
    work = "csrc/kernels/color_jitter/color_jitter_thread_work.h"
    rc, last = changed.git(ROOT, "log", "-1", "--format=%H", "--", work)
    rc2, parent = changed.git(ROOT, "rev-parse", "%s^" % last.strip()) if rc == 0 and last.strip() else (1, "")
    if rc2 != 0:
        pytest.skip("this checkout has no history of %s (a shallow clone?)" % work)
    targets = {"color_jitter": rs.SOURCES["color_jitter"]}
    sel = changed.select({"color_jitter": {"commit": parent.strip()}}, targets, ROOT)["color_jitter"]
    assert sel["run"] and work in sel["files"]
    assert not any("_cpu" in f for f in sel["files"])  # its CPU builds are not the sanitizer's
    # Recorded as it is now: nothing to run, whatever the history.
    entry = changed.entry_for(targets["color_jitter"], ROOT)
    assert entry["commit"] == head_of(ROOT)
    assert not changed.select({"color_jitter": entry}, targets, ROOT)["color_jitter"]["run"]


def test_every_target_has_sources_that_exist():
    rs = gpu_module("run_sanitize")
    bs = gpu_module("bench_sections")
    assert list(rs.SOURCES) == list(rs.OPS) + list(rs.PATHS)
    assert bs.FAIR == ("h2d", "e2e", "recipes", "workers") and set(bs.FAIR_SOURCES) == set(bs.FAIR)
    for sources in list(rs.SOURCES.values()) + list(bs.FAIR_SOURCES.values()):
        for spec in sources:
            if not spec.startswith(":("):  # git's pathspec magic (the CPU builds left out)
                assert glob.glob(os.path.join(ROOT, spec)), spec


def test_sanitize_changed_runs_only_what_changed_and_records_the_clean_targets(tmp_path):
    fake = tmp_path / "bin" / "compute-sanitizer"
    fake.parent.mkdir()
    fake.write_text(FAKE_SANITIZER % sys.executable)
    fake.chmod(0o755)
    repo = Repo(tmp_path / "repo")
    repo.write("README", "a checkout with none of the targets' sources\n")
    commit = repo.commit("one")
    env = dict(os.environ, PATH="%s:%s" % (fake.parent, os.environ["PATH"]), FAKE_FAIL="prefetcher",
               FAKE_NO_RUN="1", PYTHONPATH=ROOT)
    logs, copy, note = tmp_path / "logs", tmp_path / "out", tmp_path / "note"
    copy.mkdir()

    def run():
        return subprocess.run([sys.executable, os.path.join(GPU_DIR, "run_sanitize.py"), "--logs", str(logs),
                               "--changed", "--targets", "color_jitter,prefetcher", "--repo", str(repo.path),
                               "--record-copy", str(copy), "--note-file", str(note), "--jobs", "3"],
                              capture_output=True, text=True, timeout=120, env=env)

    p = run()
    assert p.returncode == 1, p.stdout + p.stderr  # prefetcher's reported errors
    report = json.loads((logs / "sanitize.json").read_text())
    assert {r["target"] for r in report["runs"]} == {"color_jitter", "prefetcher"}
    assert {r["tool"] for r in report["runs"] if r["target"] == "color_jitter"} == {
        "memcheck", "racecheck", "synccheck", "initcheck"}
    assert report["recorded_clean"] == ["color_jitter"]
    record = json.loads((repo.path / "build/gpu_check/gpu_clean_runs.json").read_text())["sanitize"]
    assert list(record) == ["color_jitter"]
    assert record["color_jitter"]["commit"] == commit and record["color_jitter"]["uncommitted"] == []
    assert record["color_jitter"]["tools"] == ["initcheck", "memcheck", "racecheck", "synccheck"]
    assert record["color_jitter"]["sanitizer"] == "fake compute-sanitizer 0.1"
    assert json.loads((copy / "gpu_clean_runs.json").read_text())["sanitize"] == record
    assert "2 of %d targets to run: color_jitter,prefetcher" % len(gpu_module("run_sanitize").SOURCES) in note.read_text()
    assert "recorded clean at this commit: color_jitter" in note.read_text()
    # Nothing changed since: only the target that failed runs again.
    p = run()
    report = json.loads((logs / "sanitize.json").read_text())
    assert {r["target"] for r in report["runs"]} == {"prefetcher"}
    assert report["selection"]["color_jitter"]["run"] is False
    assert report["selection"]["prefetcher"]["why"] == "no clean run recorded"


def test_bench_fair_passes_equal_resources_and_selects_what_has_no_fair_figure(tmp_path):
    bs = gpu_module("bench_sections")
    changed = gpu_module("changed")
    args = bs.parse_args(["--out", str(tmp_path), "--fair"])
    assert args.workers == bs.usable_cores() >= 1
    args.workers = 16
    cmd = bs.bench_command("e2e", "o", args, {"--threads", "--allow-dirty"})
    assert cmd[cmd.index("--workers") + 1] == "16" and cmd[cmd.index("--threads") + 1] == "16"
    assert "--allow-dirty" in cmd
    older = bs.bench_command("e2e", "o", args, set())  # a bench without those options
    assert "--threads" not in older and "--allow-dirty" not in older and "--workers" in older
    assert "--allow-dirty" in bs.bench_command("ops", "o", bs.parse_args(["--out", "x"]), {"--allow-dirty"})
    with pytest.raises(SystemExit):
        bs.parse_args(["--out", str(tmp_path), "--workers", "0"])
    repo = Repo(tmp_path / "repo")
    repo.write("prefetch/bench/h2d.py", "# 1\n")
    repo.commit("one")
    r = str(repo.path)
    assert all(s["run"] for s in bs.select_fair(r).values())
    changed.update("bench_fair", {"h2d": changed.entry_for(bs.FAIR_SOURCES["h2d"], r, workers=16)}, r)
    sel = bs.select_fair(r)
    assert not sel["h2d"]["run"] and sel["e2e"]["run"] and sel["e2e"]["why"] == "no clean run recorded"
    repo.write("prefetch/bench/h2d.py", "# 2: new code\n")
    assert bs.select_fair(r)["h2d"]["files"] == ["prefetch/bench/h2d.py"]
    # Only what can finish is started: a section stopped at its limit leaves no figure.
    assert bs.not_started(100) is None and bs.not_started(100, took=90) is None
    assert bs.not_started(100, took=95) == "not started: its last fair run took 95 s, 100 s left"
    assert bs.not_started(10).startswith("not started: 20 s of the budget left")
    # With no time at all, nothing starts, and that is the plan's order at work, not a failure.
    note = tmp_path / "note"
    assert bs.main(["--out", str(tmp_path / "o"), "--fair", "--budget", "5", "--device", "cpu",
                    "--repo", r, "--note-file", str(note)]) == 0
    assert "not started (time): h2d, e2e, recipes, workers" in note.read_text()
    assert "sections to run: h2d (new code), e2e (no fair figure yet)" in note.read_text()
    # The measured commit and N: the sections' own (the bench records them), else this checkout's.
    merged = bs.merge([], {}, "cpu")
    assert merged["commit"] == head_of(ROOT) and isinstance(merged["uncommitted_files"], int)
    part = lambda name: {"commit": "c" * 40, "dirty": True, "workers": 16, "cores": 16,  # noqa: E731
                         "config": {"sections": [name]}, "metrics": {}, "details": {},
                         "resources": {name: {"usual": {"workers": 16}, "prefetch": {"threads": 16}}}}
    merged = bs.merge([part("h2d"), part("e2e")], {}, "cuda")
    assert (merged["commit"], merged["dirty"], merged["workers"]) == ("c" * 40, True, 16)
    assert set(merged["resources"]) == {"h2d", "e2e"}


def test_nccl_stage_tries_two_ranks_and_names_nccls_refusal(tmp_path):
    ddp = gpu_module("ddp_contexts")
    assert ddp.plan("cuda", nccl2=True, gpus=1) == [("nccl_2ranks_one_gpu", 2, "nccl")]
    assert ddp.plan("cuda", nccl2=True, gpus=2) == [("nccl_2ranks", 2, "nccl")]
    assert ddp.plan("cuda", gpus=1) == [("nccl_1rank", 1, "nccl"), ("gloo_2ranks_one_gpu", 2, "gloo")]
    log = ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1691, invalid "
           "usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.27.5\n"
           "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\nLast error:\n"
           "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000\nTraceback ...")
    assert ddp.nccl_refusal(log) == (
        "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000 (NCCL 2.27.5)")
    assert ddp.nccl_refusal("NCCL error: unhandled system error") is None
    # Without CUDA the script says NCCL needs it and runs nothing (gpu_check: skipped).
    assert ddp.main(["--launch", "--nccl2", "--device", "cpu", "--out", str(tmp_path)]) == 77
    assert json.loads((tmp_path / "ddp.json").read_text())["skipped"] == "NCCL needs CUDA"


def test_a_test_past_its_limit_is_ended_and_the_next_tests_still_run(tmp_path):
    pytest.importorskip("xdist")
    (tmp_path / "test_x.py").write_text(
        "import time\ndef test_a(): pass\ndef test_stuck(): time.sleep(60)\ndef test_b(): pass\n")
    env = dict(os.environ, PYTHONPATH=GPU_DIR)
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "pytest_limits", "--test-limit", "3",
                        "--collected-file", str(tmp_path / "n"), "-o", "faulthandler_timeout=0",
                        "-n", "1", "--max-worker-restart=2", "-p", "no:cacheprovider", "-q",
                        "--junitxml", str(tmp_path / "j.xml"), str(tmp_path / "test_x.py")],
                       capture_output=True, text=True, timeout=60, env=env, cwd=str(tmp_path))
    assert p.returncode == 1, p.stdout + p.stderr
    assert (tmp_path / "n").read_text() == "3\n"
    assert "Timeout (0:00:03)!" in p.stdout + p.stderr  # faulthandler's stacks of the stuck test
    assert "test_stuck" in p.stdout and "2 passed" in p.stdout
    # The tests stage's report of it: ended, and how many of the collected ran.
    script = 'eval "$(sed -n \'/^junit_note() {/,/^}/p\' "$SCRIPT")"; junit_note "$LOGS/j.xml" "$LOGS/n"'
    env = dict(os.environ, SCRIPT=SCRIPT, LOGS=str(tmp_path), PY=sys.executable, GPU_CHECK_LOGS=str(tmp_path),
               GPU_CHECK_STAGE="tests")
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    detail = json.loads((tmp_path / "tests.detail.json").read_text())
    assert detail["ended_tests"] == ["test_x::test_stuck"] and detail["collected"] == 3
    assert (tmp_path / "tests.note").read_text() == (
        "2 passed, 0 failed, 1 errors, 0 skipped (3 of 3 collected ran); 1 ended at the test limit "
        "or crashed\n")


def test_the_profile_stage_selects_a_kernel_of_every_cuda_op():
    """ncu counts only the launches its -k regex selects, so --launch-skip/--launch-count (the
    variants' launches) are off by one for every op whose kernel the regex misses (gaussian_blur's
    two launches were, on 2026-11-30). Each op directory with a .cu file is named in the regex, as
    itself (resized_crop) or in its kernels' CamelCase (GaussianBlur...Thread)."""
    import re

    text = open(os.path.join(ROOT, "benchmarks", "gpu_check.sh")).read()
    (regex,) = re.findall(r"-k 'regex:([^']*)'", text)
    alternatives = regex.split("|")
    ops = sorted({os.path.basename(os.path.dirname(p))
                  for p in glob.glob(os.path.join(ROOT, "csrc", "kernels", "*", "*.cu"))})
    assert ops
    for op in ops:
        camel = "".join(part.title() for part in op.split("_"))
        assert any(a.startswith(op) or a.startswith(camel) for a in alternatives), (op, regex)


NCU_REPORT_FRAGMENT = """\
==PROF== Disconnected from process 1
[1] python3.12@127.0.0.1
  void prefetch::kernels::<unnamed>::normalize_flip_kernel<ToFloat32, 0>(NormalizeFlipArgs, ChannelRowsLaunch, AffineTable) (18816, 1, 1)x(256, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
    ----------------------- ----------- ------------
    Metric Name             Metric Unit Metric Value
    ----------------------- ----------- ------------
    Elapsed Cycles                cycle      192,792
    Memory Throughput                 %        39.31
    DRAM Throughput                   %        34.77
    Duration                         us        98.98
    ----------------------- ----------- ------------
    Section: Memory Workload Analysis
    Memory Throughput                          Tbyte/s         1.67
    Registers Per Thread             register/thread              44
    Achieved Occupancy                        %        56.67
  void plane_rows_kernel<GaussianBlurRowsThread>(T1, PlaneRowsLaunch, long) (1, 21504, 1)x(32, 8, 1), Context 1, Stream 7, Device 0, CC 9.0
    Memory Throughput                 %        20.81
    Duration                         ms         1.07
    Memory Throughput                          Gbyte/s       156.20
    Registers Per Thread             register/thread              46
"""


def test_the_profile_summary_names_every_launch_by_its_variant_in_common_units(tmp_path):
    """The profile stage's summary: one row a launch in the report (the stage once kept the first
    60 grep lines: 10 of 17 launches, no kernel names), each named by profile_ops.py's variant in
    order, durations in microseconds whatever ncu's unit (us, ms), rates in GB/s (Tbyte/s, Gbyte/s),
    the percentage and the rate of 'Memory Throughput' told apart, a missing metric None."""
    summary = gpu_module("ncu_summary")
    rows = summary.summarize(NCU_REPORT_FRAGMENT.splitlines(), ["nf float32", "blur rows"])
    assert [r["variant"] for r in rows] == ["nf float32", "blur rows"]
    assert [r["kernel"] for r in rows] == ["normalize_flip_kernel<ToFloat32, 0>",
                                           "plane_rows_kernel<GaussianBlurRowsThread>"]
    first, second = rows
    assert first["duration_us"] == pytest.approx(98.98)
    assert first["memory_pct"] == pytest.approx(39.31)
    assert first["memory_gbps"] == pytest.approx(1670.0)
    assert first["dram_pct"] == pytest.approx(34.77)
    assert (first["registers"], first["occupancy_pct"]) == (44, pytest.approx(56.67))
    assert second["duration_us"] == pytest.approx(1070.0)
    assert second["memory_gbps"] == pytest.approx(156.2)
    assert second["dram_pct"] is None and second["occupancy_pct"] is None
    # More launches than names: still a row each, and the table says the names may not match.
    rows = summary.summarize(NCU_REPORT_FRAGMENT.splitlines(), ["only one"])
    assert rows[1]["variant"] == "launch 1 (unlisted)"
    assert "2 launches in the report, 1 variants listed" in summary.format_rows(rows, 1)
    report, names = tmp_path / "ncu.txt", tmp_path / "variants.json"
    report.write_text(NCU_REPORT_FRAGMENT)
    names.write_text(json.dumps(["nf float32", "blur rows"]))
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu", "ncu_summary.py"),
                          str(report), str(names)], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[1].startswith("nf float32") and "1070.00" in out.splitlines()[2]
