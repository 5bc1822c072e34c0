"""What becomes of a source iterator an epoch leaves behind (broken off, or failed).

The producer drops its iterator when an epoch ends early; most sources are then freed at once.
But after a failure the exception's traceback, which the consumer may keep for as long as it
likes, holds the frames the error passed through — a DataLoader iterator's among them — and
torch's DataLoader re-raises a worker's exception from a local variable of its own frame, a
cycle that only a garbage collection frees. Its workers would linger until then, and be freed
by whichever process runs that collection: a forked worker of a later DataLoader, which then
tests process handles that are not its children ("can only test a child process"). So the
workers of an abandoned DataLoader iterator are shut down when it is abandoned.
"""
from torch.utils.data.dataloader import _BaseDataLoaderIter

__all__ = ["release_workers"]


def release_workers(iterator, loader):
    """Shuts down the workers of ``iterator``: a torch DataLoader iterator's, unless ``loader`` (the
    DataLoader, or the source that wraps it) keeps them for its next epoch
    (``persistent_workers``); an epoch iterator that names its DataLoader iterator in
    ``dataloader_iterator`` (the worker ring's) is closed, which decides that itself."""
    if hasattr(iterator, "dataloader_iterator"):
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
        return
    if isinstance(iterator, _BaseDataLoaderIter) and not getattr(loader, "persistent_workers", False):
        shutdown = getattr(iterator, "_shutdown_workers", None)  # the multi-process iterator's
        if shutdown is not None:
            shutdown()
