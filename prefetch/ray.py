"""``prefetch.ray``, the documented path of Ray Data's source: it lives in :mod:`prefetch.sources.ray`."""
from .sources.ray import *  # noqa: F401,F403
from .sources.ray import __all__  # noqa: F401
