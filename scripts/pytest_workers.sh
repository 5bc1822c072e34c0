# Sourced by the scripts that run the Python suite (test.sh, sanitize.sh python,
# check_cuda_build.sh): sets `pytest_workers`, the pytest-xdist arguments for interpreter $1.
# The suite's tests mostly wait (child interpreters, DataLoader workers starting, timeouts being
# proved): on 2 cores the load average stayed under 1 with one pytest process, and 4 workers took
# the suite from ~530 to ~300 s (`PREFETCH_TEST_WORKERS=0 bash scripts/test.sh` against the default).
# Each test is independent of the others' processes: the leak checks count only their own pids'
# shared-memory entries and their own process's threads and descriptors.
#   PREFETCH_TEST_WORKERS=4   pytest processes (0: one process, no xdist); without pytest-xdist
#                             installed (the GPU image) the suite runs in one process
pytest_workers=()
if [ "${PREFETCH_TEST_WORKERS:-4}" != 0 ] && "$1" -c "import xdist" 2>/dev/null; then
  # worksteal: an idle worker takes queued tests from a busy one, so that the slowest files
  # (the worker ring's faults) do not leave the others waiting at the end.
  pytest_workers=(-n "${PREFETCH_TEST_WORKERS:-4}" --dist worksteal)
fi
