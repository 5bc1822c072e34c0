"""The e2e section's training loop, the same for every pipeline, and its timing.

One step: the next batch from the pipeline, ``contiguous(memory_format=channels_last)`` (timm's
training script does the same for a channels_last model; a no-op for a batch already in that
layout), the forward pass under bf16 autocast on CUDA, cross entropy, backward, SGD. Nothing in
the step synchronizes the device: the host runs ahead as in a user's loop.

Where the time goes, per timed step ``k``:
- on CUDA, from events on the model's stream: ``done[k-1]`` (the previous step's last kernel),
  ``ready[k]`` (recorded right after ``next()`` returned: the batch's copy, and for the usual
  pipeline its normalization, are queued before it) and ``done[k]``. The step's time is
  ``done[k] - done[k-1]``; the time the GPU waited for data is ``ready[k] - done[k-1]`` — the
  GPU idles there until the host has the batch, then runs the input work queued on its stream
  (a side stream's work that is not finished by then: the wait a Prefetcher or timm's
  PrefetchLoader puts on the model's stream).
- on a CPU, the host clock: the step's time from the end of the previous step, and the time
  spent in ``next()``.
"""
import time

import torch
import torch.nn.functional as F


class Trainer:
    """A model (moved to ``device``, channels_last) and its optimizer (SGD, lr 0.01, momentum
    0.9, weight decay 1e-4: torchvision's recipe's optimizer; the values do not change the
    speed), and the training step every pipeline feeds."""

    def __init__(self, model, device):
        self.device = torch.device(device)
        self.model = model.to(self.device, memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9,
                                   weight_decay=1e-4)
        self.autocast = self.device.type == "cuda"  # bf16 autocast on CUDA only

    def step(self, images, labels):
        """One training step on ``images`` (float [B, 3, H, W] on the device) and ``labels``
        (int64 [B])."""
        images = images.contiguous(memory_format=torch.channels_last)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            loss = F.cross_entropy(self.model(images), labels)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()


def run_steps(trainer, batches, steps):
    """``steps`` untimed training steps on ``batches`` (warm-up). Returns the images they took."""
    n = 0
    for _ in range(steps):
        images, labels = next(batches)
        trainer.step(images, labels)
        n += images.shape[0]
    return n


class StepRecord:
    """The timed steps of one pass: :meth:`run` them, then (after the device is synchronized)
    :meth:`result` gives every step's seconds, the seconds of each the device (CUDA) or the step
    (CPU) waited for data, and the host's seconds in ``next()``."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"
        self.images = 0
        self.host_wait_s, self._cpu_step_s, self._events = [], [], []
        self._start = None

    def run(self, trainer, batches, steps):
        if self.cuda:
            stream = torch.cuda.current_stream(trainer.device)
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record(stream)
        t_prev = time.perf_counter()
        for _ in range(steps):
            t0 = time.perf_counter()
            images, labels = next(batches)
            t1 = time.perf_counter()
            if self.cuda:
                ready, done = (torch.cuda.Event(enable_timing=True),
                               torch.cuda.Event(enable_timing=True))
                ready.record(stream)
            trainer.step(images, labels)
            if self.cuda:
                done.record(stream)
                self._events.append((ready, done))
            else:
                t2 = time.perf_counter()
                self._cpu_step_s.append(t2 - t_prev)
                t_prev = t2
            self.host_wait_s.append(t1 - t0)
            self.images += images.shape[0]

    def result(self):
        """``{"step_s", "wait_s", "host_wait_s"}``: lists of seconds, one per timed step. On CUDA
        the events must have completed (the bench synchronizes after each timed pass)."""
        if not self.cuda:
            return {"step_s": list(self._cpu_step_s), "wait_s": list(self.host_wait_s),
                    "host_wait_s": list(self.host_wait_s)}
        step_s, wait_s, prev = [], [], self._start
        for ready, done in self._events:
            step_s.append(prev.elapsed_time(done) / 1e3)
            wait_s.append(prev.elapsed_time(ready) / 1e3)
            prev = done
        return {"step_s": step_s, "wait_s": wait_s, "host_wait_s": list(self.host_wait_s)}


class Passes:
    """Opens and times the passes of one model's pipelines for ``timing.interleaved``.

    ``opener(name)`` is a setup: it closes the pass still open (the previous sample's, whatever
    pipeline it was: its workers stop outside every timed region), builds ``name``'s pipeline
    (``builders[name]()``, a ``Pass``), and runs ``warmup`` untimed steps through it.
    :meth:`timed` runs ``steps`` timed steps and keeps their :class:`StepRecord` under
    ``records[name]``. :meth:`close` closes the last pass."""

    def __init__(self, trainer, builders, warmup, steps, progress=None, label=""):
        self.trainer, self.builders = trainer, builders
        self.warmup, self.steps = warmup, steps
        self.progress, self.label = progress, label
        self.records = {name: [] for name in builders}
        self._open = None

    def opener(self, name):
        def setup():
            self.close()
            if self.progress:
                self.progress("e2e: %s%s pass %d (%d warm-up + %d timed steps)"
                              % (self.label, name, len(self.records[name]) + 1, self.warmup,
                                 self.steps))
            self._open = self.builders[name]()
            run_steps(self.trainer, self._open.batches, self.warmup)
            return name, self._open
        return setup

    def timed(self, arg):
        name, p = arg
        record = StepRecord(self.trainer.device)
        record.run(self.trainer, p.batches, self.steps)
        self.records[name].append(record)

    def close(self):
        if self._open is not None:
            p, self._open = self._open, None
            p.close()
