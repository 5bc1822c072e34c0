"""``prefetch.crop_boxes``, the documented path of the window draws: they live in
:mod:`prefetch.transforms.crop_boxes`."""
from .transforms.crop_boxes import *  # noqa: F401,F403
from .transforms.crop_boxes import __all__  # noqa: F401
