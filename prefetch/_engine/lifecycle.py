"""How a Pipeline's threads and engine end: joining the producer (bounded), stopping a run,
shutting an engine down (an engine a fork inherited is abandoned, never waited on), ``with``
support, and interpreter exit, where every live Pipeline is stopped within one shared deadline."""
import atexit
import ctypes
import os
import threading
import time
import weakref

__all__ = ["ClosesOnExit", "LIVE", "abandon", "join", "shutdown", "stop_run"]

# How long close() waits for a producer thread that is stuck inside the source's own next().
# At interpreter exit this is the bound for all Pipelines together, not for each (_at_exit).
_JOIN_TIMEOUT_S = 5.0
_exit_deadline = [None]  # set by _at_exit: every join from then on shares this one deadline
LIVE = weakref.WeakSet()  # Pipelines not closed yet, for _at_exit


def join(thread, until_gone=False):
    """Joins a producer thread for at most _JOIN_TIMEOUT_S (at exit: until the shared deadline);
    a thread stuck inside the source's own next() is a daemon and is left behind. With
    ``until_gone`` (close()), also waits until the OS thread has finished exiting."""
    if thread is None or thread is threading.current_thread() or thread.ident is None:
        return  # not started (close() raced run()), or the caller is that thread
    deadline = _exit_deadline[0]
    thread.join(_JOIN_TIMEOUT_S if deadline is None else max(0.0, deadline - time.monotonic()))
    if until_gone and not thread.is_alive():
        _wait_gone(thread.native_id)


def _wait_gone(native_id, limit_s=1.0):
    """Python's join() returns before the OS thread has finished exiting (the producer's C++
    thread-local state, torch's included, is torn down after it): wait, briefly, until the
    thread is gone from /proc, so that "close() joined every thread" holds for anyone counting
    the process's threads. Not Linux: nothing to wait on."""
    path = "/proc/self/task/%d" % native_id
    end = time.monotonic() + limit_s
    while os.path.exists(path) and time.monotonic() < end:
        time.sleep(0.0002)


def abandon(engine):
    """Keeps an engine inherited across fork() from ever being destroyed: its threads do not
    exist in this process and its mutexes may be held by them, so cancelling, closing or
    destroying it (which joins those threads) could block forever. It is leaked on purpose."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(engine))


def _at_exit():
    """Interpreter exit (also after Ctrl-C): stops every live Pipeline's run first, so all their
    producers wind down at once, then closes each, all within one _JOIN_TIMEOUT_S."""
    _exit_deadline[0] = time.monotonic() + _JOIN_TIMEOUT_S
    live = list(LIVE)
    pid = os.getpid()
    for pipeline in live:
        state = pipeline._current[0]
        if state is not None and not state.done and state.pid == pid:
            state.stop.set()
            try:
                pipeline.engine.cancel(state.token)
            except Exception:  # noqa: BLE001 - closed meanwhile
                pass
    for pipeline in live:
        pipeline._finalizer()


atexit.register(_at_exit)


def stop_run(engine, state):
    if state is None or state.done:
        return
    state.done = True
    state.stop.set()
    if state.pid != os.getpid():
        return  # started before a fork: its engine and producer thread are the parent's
    engine.cancel(state.token)
    join(state.thread)


def shutdown(engine, current, lock, pid):
    if pid != os.getpid():  # a forked child: never wait on the parent's threads or locks
        current[0] = None
        abandon(engine)
        return
    with lock:  # not while run() is between starting an epoch and starting its thread
        state = current[0]
        stop_run(engine, state)
        if state is not None and state.pid == pid:  # also a run that had ended by itself
            join(state.thread, until_gone=True)
        current[0] = None
        engine.close()


class ClosesOnExit:
    """``with loader:`` closes the loader (every loader has ``close()``)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
