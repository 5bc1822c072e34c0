"""python -m prefetch.info: what a bug report needs, as text, JSON and prefetch.info.report()."""
import io
import json
import os
import subprocess
import sys

import pytest
import torch

import prefetch
import prefetch.info as info

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTIONS = ("prefetch", "build", "torch", "cuda", "host", "python", "os", "env", "packages")


def run_module(*args, env=None):
    return subprocess.run([sys.executable, "-m", "prefetch.info", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=env)


def test_module_prints_the_report():
    proc = run_module()
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("prefetch %s at " % prefetch.__version__)
    for needle in ("CUDA:", "arch list:", "JPEG decoder:", "sanitizers:", "DEBUG:", "libstdc++:", "torch %s" % torch.__version__,
                   "pinned-memory limit (ulimit -l)", "cores:", "Python ", "OS: ", "TORCH_CUDA_ARCH_LIST=",
                   "OMP_NUM_THREADS="):
        assert needle in out, (needle, out)


def test_module_json_matches_the_function():
    proc = run_module("--json", env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(SECTIONS) <= set(data)
    assert data["env"]["OMP_NUM_THREADS"] == "1"
    assert data["build"]["cuda"] is prefetch.built_with_cuda()
    assert data["build"]["jpeg"] is prefetch.built_with_jpeg()
    assert data["prefetch"]["version"] == prefetch.__version__


def test_report_returns_the_dict_and_prints_it():
    out = io.StringIO()
    data = info.report(out=out)
    assert set(SECTIONS) <= set(data)
    assert out.getvalue() == info.format_report(data)
    assert data["prefetch"]["location"] == os.path.dirname(os.path.abspath(prefetch.__file__))
    assert data["torch"]["version"] == torch.__version__
    assert data["python"]["version"] == sys.version.split()[0]
    host = data["host"]
    assert host["cpu_count"] == os.cpu_count()
    assert host["torch_num_threads"] == torch.get_num_threads()
    assert host["cpu_kernel_build"] == prefetch.ops.cpu_kernel_build()
    assert set(host["pinned_memory_limit"]) == {"soft", "hard"}
    assert all(v == "unlimited" or v.endswith(" KiB") for v in host["pinned_memory_limit"].values())
    if hasattr(os, "sched_getaffinity"):
        assert host["cpu_affinity"] == len(os.sched_getaffinity(0))
    cuda = data["cuda"]
    assert cuda["torch_cuda"] == torch.version.cuda
    assert cuda["available"] is torch.cuda.is_available()
    if not torch.cuda.is_available():
        assert cuda["device_count"] == 0 and not torch.cuda.is_initialized()
    assert info.report(out=None) is not None  # prints nothing


def test_build_fields_agree_with_the_extension():
    build = info.report(out=None)["build"]
    assert build["cuda"] is prefetch.built_with_cuda()
    assert build["jpeg"] is prefetch.built_with_jpeg()
    library = torch.ops.prefetch._jpeg_decoder_library()
    assert build["jpeg_library"] == library
    assert build["extension"] == prefetch._C.__file__
    if os.path.exists(info.BUILD_INFO_PATH):
        with open(info.BUILD_INFO_PATH) as f:
            recorded = json.load(f)
        # A record that disagrees with the loaded extension is reported, never hidden.
        assert build["consistent"] is (not build["problems"])
        if build["consistent"]:
            assert recorded["cuda"] is prefetch.built_with_cuda()
            assert recorded["jpeg"] is prefetch.built_with_jpeg()
        assert build["cuda_why"] == recorded["cuda_why"]
        assert build["arch_list"] == recorded["arch_list"]
        assert build["cuda_why"].startswith("on" if recorded["cuda"] else "off")
        assert (recorded["arch_list"] is None) is (not recorded["cuda"])


def test_missing_build_info_says_unknown(monkeypatch, tmp_path):
    monkeypatch.setattr(info, "BUILD_INFO_PATH", str(tmp_path / "missing.json"))
    out = io.StringIO()
    build = info.report(out=out)["build"]
    for key in ("cuda_why", "arch_list", "jpeg_why", "sanitize", "debug", "built_at", "consistent"):
        assert build[key] == "unknown", (key, build[key])
    assert build["info_file"].startswith("unknown")
    # What the loaded extension says is still known.
    assert build["cuda"] is prefetch.built_with_cuda()
    assert build["jpeg"] is prefetch.built_with_jpeg()
    assert "arch list:        unknown" in out.getvalue()


def test_a_record_that_disagrees_is_flagged(monkeypatch, tmp_path):
    path = tmp_path / "_build_info.json"
    path.write_text(json.dumps({"cuda": not prefetch.built_with_cuda(), "cuda_why": "on (test)", "jpeg":
                                prefetch.built_with_jpeg(), "torch": torch.__version__, "sanitize": None}))
    monkeypatch.setattr(info, "BUILD_INFO_PATH", str(path))
    out = io.StringIO()
    build = info.report(out=out)["build"]
    assert build["consistent"] is False
    assert build["cuda_why"] == "on (test)"
    assert build["sanitize"] is None
    assert any("cuda=" in p for p in build["problems"])
    assert "WARNING: the record says cuda=" in out.getvalue()


@pytest.mark.parametrize("content", ["not json", "[1, 2]"])
def test_an_unreadable_record_is_unknown(monkeypatch, tmp_path, content):
    path = tmp_path / "_build_info.json"
    path.write_text(content)
    monkeypatch.setattr(info, "BUILD_INFO_PATH", str(path))
    assert info.report(out=None)["build"]["arch_list"] == "unknown"


def test_the_gpu_jpeg_decoder_is_named():
    from prefetch.ops import gpu_decoders

    out = io.StringIO()
    data = info.report(out=out)
    assert data["cuda"]["gpu_jpeg_decoder"] == gpu_decoders.describe()
    assert "  GPU JPEG decoder: %s\n" % gpu_decoders.describe() in out.getvalue()
    assert "torchcodec" in data["packages"]
    proc = run_module("--json", env=dict(os.environ, PREFETCH_GPU_JPEG_DECODER="cpu"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["cuda"]["gpu_jpeg_decoder"].endswith("chosen by PREFETCH_GPU_JPEG_DECODER=cpu)")
    assert data["env_prefetch"]["PREFETCH_GPU_JPEG_DECODER"] == "cpu"


@pytest.mark.parametrize("versions, line", [
    ({"torchvision": "0.26.0+cu130"}, "torchvision 0.26.0+cu130 (nvJPEG)"),
    ({"torchvision": "0.26.0", "torchcodec": "0.16.0"}, "torchcodec 0.16.0 (nvJPEG)"),
    ({}, "cpu (torchcodec is not installed; torchvision is not installed)"),
])
def test_the_gpu_jpeg_decoder_comes_from_what_is_installed_without_importing_it(monkeypatch, versions, line):
    from prefetch.ops import gpu_backends, gpu_decoders

    imported = []
    for cls in (gpu_decoders.TorchCodecBackend, gpu_decoders.TorchvisionBackend):
        monkeypatch.setattr(cls, "_load", lambda self: imported.append(self.name))
    monkeypatch.setattr(gpu_decoders, "BACKENDS", [gpu_decoders.TorchCodecBackend(),
                                                   gpu_decoders.TorchvisionBackend(), gpu_decoders.CpuBackend()])
    monkeypatch.setattr(gpu_backends, "_installed_version", lambda package: versions.get(package))
    monkeypatch.delenv("PREFETCH_GPU_JPEG_DECODER", raising=False)
    out = io.StringIO()
    assert info.report(out=out)["cuda"]["gpu_jpeg_decoder"] == line
    assert "GPU JPEG decoder: %s" % line in out.getvalue()
    assert imported == []
    if not torch.cuda.is_available():
        assert not torch.cuda.is_initialized()


def test_a_failing_gpu_jpeg_decoder_line_does_not_fail_the_report(monkeypatch):
    from prefetch.ops import gpu_decoders

    def broken():
        raise OSError("cannot read site-packages")

    monkeypatch.setattr(gpu_decoders, "describe", broken)
    assert info.report(out=None)["cuda"]["gpu_jpeg_decoder"] == "unknown (OSError: cannot read site-packages)"
