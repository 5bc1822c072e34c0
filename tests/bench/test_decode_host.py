"""The bench's decode_host section: structure, never speed — its pipelines
built with N threads, timed in interleaved rounds (at least 5 after a warm-up), each figure a
median with its range, and the fake GPU decoder called once a batch. That its batches are the
ArrayLoader's: tests/ops/test_decode_host_stage.py::test_the_bench_batches_are_the_array_loaders."""
import pytest
import torch

import prefetch
from prefetch.bench import decode_host, timing
from prefetch.bench.section import Config, unequal_resources

pytest.importorskip("PIL")
pytestmark = pytest.mark.skipif(not prefetch.built_with_jpeg(), reason="the section needs libjpeg-turbo")

N = 3


def test_the_section_times_its_pipelines_in_interleaved_rounds_with_n_threads(monkeypatch):
    rounds = []
    real = timing.interleaved

    def spied(calls, repeats, **kw):
        order = []
        out = real(calls, repeats, **dict(kw, order=order))
        rounds.append((list(calls), repeats, kw.get("warmup", 1), order))
        return out

    monkeypatch.setattr(timing, "interleaved", spied)
    config = Config(device=torch.device("cpu"), quick=True, batch_sizes=[4, 8], workers=N,
                    progress=lambda message: None)
    result = decode_host.run(config)
    (names, repeats, warmup, order), = rounds
    assert names == [decode_host.GPU_PATH, decode_host.GATHER, decode_host.CPU_DECODER]
    assert repeats >= 5 and warmup >= 1 and order == names * repeats  # A, B, C, A, B, C...
    assert result.resources == {name: {"workers": 0, "threads": N} for name in names}
    assert unequal_resources(result.resources, N) == []
    row = result.rows
    assert row["batch_size"] == 8 and row["repeats"] == repeats and row["threads"] == N
    assert row["clock"].startswith("time.process_time")
    assert row["fake_calls_per_batch"] == 1.0  # one batched call a batch, never one an image
    for name in names:
        for clock in ("cpu", "thread_cpu", "wall"):
            low, high = row[name]["%s_us_per_image_range" % clock]
            assert 0 <= low <= row[name]["%s_us_per_image" % clock] <= high, (name, clock)
    assert set(result.metrics) == {"decode_host_gpu_path_cpu_us_per_image",
                                   "decode_host_gpu_path_thread_cpu_us_per_image",
                                   "decode_host_gather_cpu_us_per_image",
                                   "decode_host_cpu_decoder_cpu_us_per_image"}
    assert decode_host.GPU_PATH in result.table and "interleaved rounds" in result.table
    # The fake decoder is registered only while its pipeline runs.
    assert prefetch.ops.gpu_decoders.BACKENDS[0].name != "fake"


def test_the_section_is_registered():
    from prefetch.bench.__main__ import BY_NAME

    assert BY_NAME["decode_host"] is decode_host.SECTION
