"""The DALI peers' epoch (prefetch.bench.pipelines.dali_epoch_outputs), against a recording fake of
DALI's pipeline: DALI itself is optional and absent in CI, and a peer that schedules one batch past
its epoch computes it during the next pipeline's timed epoch (the bias it exists to prevent)."""
import pytest

from prefetch.bench.pipelines import DALI_QUEUE, dali_epoch_outputs


class RecordingPipe:
    """DALI's hand-scheduling calls, recorded; outputs() hands out the oldest scheduled run and
    fails, as DALI does, when none is scheduled or the last one was not released."""

    def __init__(self):
        self.calls, self.pending, self.next_id, self.held = [], [], 0, None

    def schedule_run(self):
        self.calls.append("schedule")
        self.pending.append(self.next_id)
        self.next_id += 1

    def outputs(self):
        assert self.pending, "outputs() with nothing scheduled: DALI would block forever"
        assert self.held is None, "outputs() before release_outputs()"
        self.calls.append("outputs")
        self.held = self.pending.pop(0)
        return (self.held,)

    def release_outputs(self):
        self.calls.append("release")
        self.held = None


def converted(pipe):
    """A convert that records when it runs and checks it reads a batch DALI still holds."""
    def convert(out):
        assert pipe.held == out[0], "converted after its release"
        pipe.calls.append("convert")
        return out[0] * 10
    return convert


@pytest.mark.parametrize("iterations", [0, 1, 2, 5])
@pytest.mark.parametrize("queue", [1, 2, 3])
def test_an_epoch_schedules_exactly_its_batches_at_most_queue_ahead(iterations, queue):
    pipe = RecordingPipe()
    got = list(dali_epoch_outputs(pipe, iterations, converted(pipe), queue))
    assert got == [10 * k for k in range(iterations)]
    assert pipe.calls.count("schedule") == iterations  # none past the epoch's end
    assert pipe.calls.count("release") == iterations and pipe.held is None
    # Never more than `queue` runs scheduled and not yet taken.
    ahead = 0
    for call in pipe.calls:
        ahead += {"schedule": 1, "outputs": -1}.get(call, 0)
        assert 0 <= ahead <= queue


def test_the_next_run_is_scheduled_before_the_consumer_gets_this_batch():
    """Converted, released, the next run scheduled, then handed out: DALI computes batch k + 1
    while the consumer holds batch k (the order the peers timed before the helper)."""
    pipe = RecordingPipe()
    epoch = dali_epoch_outputs(pipe, 3, converted(pipe))
    assert next(epoch) == 0
    assert pipe.calls == ["schedule", "outputs", "convert", "release", "schedule"]
    assert list(epoch) == [10, 20]
    taken = ["outputs", "convert", "release"]
    assert pipe.calls == ["schedule"] + taken + ["schedule"] + taken + ["schedule"] + taken


def test_a_failing_convert_still_releases_the_batch():
    pipe = RecordingPipe()

    def fails(out):
        raise RuntimeError("bad batch")

    with pytest.raises(RuntimeError, match="bad batch"):
        next(dali_epoch_outputs(pipe, 2, fails))
    assert pipe.held is None and pipe.calls == ["schedule", "outputs", "release"]


def test_the_peers_default_queue_is_one():
    """At depth 2 DALI's executor computed one iteration past an epoch's last scheduled one."""
    assert DALI_QUEUE == 1
