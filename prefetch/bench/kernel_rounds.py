"""Device work compared in interleaved rounds: :func:`prefetch.bench.timing.interleaved`'s order
(A, B, A, B... after each call's warm-ups) with :func:`prefetch.bench.timing.kernel_samples`'
figures (on a GPU, CUDA events around ``inner`` back-to-back calls, so the host's launch and
synchronisation overhead stays out of a kernel's time; elsewhere, the host clock around one
call)."""
from . import timing


def interleaved_kernels(calls, repeats, device, *, warmup=1, inner=10, order=None):
    """Seconds per call of each fn of ``calls`` (name -> fn of no arguments), one kernel sample
    of each a round, ``repeats`` rounds, interleaved. Returns ``{name: [seconds of round 0, 1,
    ...]}``; ``order`` as :func:`timing.interleaved` takes it. Each call's ``warmup`` untimed
    rounds come first, as there."""
    figures = {name: [] for name in calls}

    def sampled(name, fn):
        def call():  # its host-clock time (interleaved's) is left aside: the kernel's is kept
            figures[name].extend(timing.kernel_samples(fn, 1, device, warmup=0, inner=inner))
        return call

    timing.interleaved({name: sampled(name, fn) for name, fn in calls.items()}, repeats,
                       device=device, warmup=warmup, order=order)
    return {name: values[warmup:] for name, values in figures.items()}
