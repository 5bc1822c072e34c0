import os
import signal

import pytest
import torch

from .sanitized_workers import start_workers_by_forkserver

FAIL_WITHOUT_CUDA = os.environ.get("FAIL_WITHOUT_CUDA", "0") == "1"

# Set by scripts/sanitize.sh python (the extension under ASan + UBSan). There fork() from a
# threaded process can deadlock the child inside ASan's allocator: DataLoader workers start by
# forkserver instead (tests/sanitized_workers.py says why and how), and the tests of fork itself
# are skipped. The regular run covers fork.
SANITIZED = os.environ.get("PREFETCH_SANITIZED", "0") == "1"
if SANITIZED:
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    start_workers_by_forkserver()

# The Ctrl-C tests send SIGINT to a child interpreter and expect KeyboardInterrupt. A suite started
# as a background job (`nohup ... &` from a script) inherits SIGINT ignored, and so would every
# child, whose Python then installs no KeyboardInterrupt handler: the interrupt would be lost and
# the tests fail for the way the suite was started. A handled (not ignored) SIGINT here resets to
# the default in every child at exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def cuda_ready():
    import prefetch

    return torch.cuda.is_available() and prefetch.built_with_cuda()


def require_cuda():
    """Skips a CUDA case without a GPU; FAIL_WITHOUT_CUDA=1 (GPU runs) makes that a failure."""
    if cuda_ready():
        return
    why = "CUDA not available (torch.cuda.is_available()=%s, prefetch built with CUDA=%s)" % (
        torch.cuda.is_available(), __import__("prefetch").built_with_cuda())
    if FAIL_WITHOUT_CUDA:
        pytest.fail("FAIL_WITHOUT_CUDA=1 but " + why)
    pytest.skip(why)


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def device(request):
    """Every test that takes `device` runs once on the CPU and once on CUDA (skipped without)."""
    if request.param == "cuda":
        require_cuda()
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def thread_count():
    return len(os.listdir("/proc/self/task"))
