"""The neighbourhood filters on uint8 ``[N, C, H, W]`` images (CPU and CUDA), each its Python
wrapper and its fake kernel: ``gaussian_blur`` (torchvision's ``gaussian_blur`` with each image its
own sigma: a separable convolution, reflect padding, rounded to uint8), and
:func:`gaussian_kernels`, its 1-D kernels as torchvision computes them.
"""
import math
from typing import Sequence, Tuple, Union

import torch

from .._core.extension import C as _C  # noqa: F401  (loading the extension registers the ops)
from .arguments import DTYPE_NAMES, check_output_size, check_uint8_images

__all__ = ["gaussian_blur", "gaussian_kernels"]

Sigma = Union[None, float, Sequence[float], torch.Tensor]


def gaussian_kernels(kernel_size: int, sigma: torch.Tensor) -> torch.Tensor:
    """One 1-D Gaussian kernel per sigma, as torchvision's ``_get_gaussian_kernel1d`` computes it
    for a uint8 image (in float32): ``softmax(-(x / sigma)^2)`` over ``x = linspace(-lim, lim,
    kernel_size)`` with ``lim = (kernel_size - 1) / (2 * sqrt(2))``, i.e. the taps
    ``exp(-t^2 / (2 sigma^2))`` at ``t = -(k - 1) / 2 .. (k - 1) / 2``, normalised to sum 1.

    Args:
        kernel_size (int): the taps, odd and positive.
        sigma (Tensor[N]): each kernel's standard deviation in pixels, > 0 (any float dtype; it is
            rounded to float32, as torchvision's float32 division by a Python float rounds it).

    Returns:
        Tensor[N, kernel_size]: float32, on the CPU (the op's callers move it to the images'
        device, so that every device blurs with the same taps).

    Raises:
        ValueError: kernel_size not odd and positive, a sigma not positive.
    """
    if isinstance(kernel_size, bool) or not isinstance(kernel_size, int) or kernel_size <= 0 or kernel_size % 2 == 0:
        raise ValueError("gaussian_kernels: kernel_size must be an odd positive int, got %r" % (kernel_size,))
    s = torch.as_tensor(sigma).detach().to("cpu", torch.float32).reshape(-1)
    if not torch.compiler.is_compiling() and s.numel() and not bool((s > 0).all()):
        raise ValueError("gaussian_kernels: every sigma must be > 0, got %s" % s[~(s > 0)][:4].tolist())
    lim = (kernel_size - 1) / (2.0 * math.sqrt(2.0))
    x = torch.linspace(-lim, lim, steps=kernel_size, dtype=torch.float32)
    return torch.softmax(x.view(1, -1).div(s.view(-1, 1)).pow(2).neg(), dim=1)


def _sizes(kernel_size) -> Tuple[int, int]:
    sizes = list(kernel_size) if isinstance(kernel_size, (list, tuple)) else [kernel_size, kernel_size]
    if len(sizes) != 2 or not all(isinstance(k, int) and not isinstance(k, bool) and k > 0 and k % 2 == 1
                                  for k in sizes):
        raise ValueError("gaussian_blur: kernel_size must be an odd positive int or a sequence of two "
                         "(x, y), got %r" % (kernel_size,))
    return sizes[0], sizes[1]


def _sigmas(sigma: Sigma, sizes: Tuple[int, int], n: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Each image's (sigma_x, sigma_y) as two float64 [N] tensors on the CPU."""
    if sigma is None:  # torchvision's default: ksize * 0.15 + 0.35 for each side
        return (torch.full((n,), sizes[0] * 0.15 + 0.35, dtype=torch.float64),
                torch.full((n,), sizes[1] * 0.15 + 0.35, dtype=torch.float64))
    if isinstance(sigma, torch.Tensor):
        t = sigma.detach().to("cpu", torch.float64)
        if t.dim() == 0:
            t = t.expand(n)
        if t.dim() == 1 and t.shape[0] == n:
            return t, t
        if t.dim() == 2 and tuple(t.shape) == (n, 2):
            return t[:, 0], t[:, 1]
        raise ValueError("gaussian_blur: a sigma tensor must be a scalar, [N] or [N, 2] (x, y) with N = %d, "
                         "got shape %s" % (n, list(sigma.shape)))
    values = list(sigma) if isinstance(sigma, (list, tuple)) else [sigma, sigma]
    if len(values) == 1:
        values = values * 2
    if len(values) != 2:
        raise ValueError("gaussian_blur: sigma must be a float or a sequence of one or two (x, y), got %r"
                         % (sigma,))
    return (torch.full((n,), float(values[0]), dtype=torch.float64),
            torch.full((n,), float(values[1]), dtype=torch.float64))


def gaussian_blur(images: torch.Tensor, kernel_size: Union[int, Sequence[int]], sigma: Sigma = None) -> torch.Tensor:
    """torchvision's ``gaussian_blur`` on uint8 images, each image with its own sigma: the image
    padded by ``kernel_size // 2`` with torch's reflect padding, convolved with the outer product of
    its 1-D Gaussian kernels (:func:`gaussian_kernels`), rounded half to even and cast to uint8.

    Computed as two passes (along x into float32, then along y), each value's sum in float64, where
    torchvision convolves in float32 with the 2-D kernel: the results agree except where the exact
    value lies within about 1e-3 of a half, which may round the other way (at most 1 apart;
    tests/ops/test_gaussian_blur.py bounds them; against torchvision 0.28, 1 value in 100,000).
    A NaN or infinite sum (non-finite taps given to the op itself) writes 0. The CPU and CUDA
    kernels write the same bytes.
    Compiles with ``torch.compile(fullgraph=True)``.

    Args:
        images (Tensor[N, C, H, W]): uint8, any strides, C * H below 2^31.
        kernel_size (int or (int, int)): the taps along x and along y (torchvision's order), odd
            and positive; ``kernel_size // 2`` must be below the side it pads (torch's reflect
            padding), so a 1-pixel side takes only 1.
        sigma (None, float, (float, float), or Tensor): the standard deviations in pixels, > 0:
            None for torchvision's default ``0.15 * kernel_size + 0.35`` per side; one number, or
            (x, y), for every image; a Tensor[N] (both sides) or Tensor[N, 2] ((x, y)) per image,
            on any device (the kernels are computed on the CPU and moved to the images': a CPU
            tensor spares a CUDA caller a synchronisation).

    Returns:
        Tensor[N, C, H, W]: uint8, contiguous, on the images' device.

    Raises:
        ValueError: a kernel size not odd and positive, a sigma not positive or of the wrong shape.
        RuntimeError: images not uint8 ``[N, C, H, W]``, or a kernel too wide for the images (named,
            with the widest allowed).
    """
    kx, ky = _sizes(kernel_size)
    n = images.shape[0] if isinstance(images, torch.Tensor) and images.dim() > 0 else 0
    sx, sy = _sigmas(sigma, (kx, ky), n)
    device = images.device if isinstance(images, torch.Tensor) else "cpu"
    kernel_x = gaussian_kernels(kx, sx).to(device)
    kernel_y = gaussian_kernels(ky, sy).to(device)
    return torch.ops.prefetch.gaussian_blur.default(images, kernel_x, kernel_y)


def _check_taps(taps, name, n, side, side_name):
    torch._check(taps.dtype == torch.float32 and taps.dim() == 2 and taps.shape[0] == n, lambda: (
        "gaussian_blur: %s must be float32 [N, k] with N = %s (one kernel per image), got %s of shape %s"
        % (name, n, DTYPE_NAMES.get(taps.dtype, taps.dtype), list(taps.shape))))
    k = taps.shape[1]
    torch._check(k >= 1 and k % 2 == 1, lambda: (
        "gaussian_blur: %s's kernel size must be odd and positive, got %s" % (name, k)))
    torch._check(side == 0 or n == 0 or k // 2 < side, lambda: (
        "gaussian_blur: %s's kernel size %s pads each side by %s, which reflect padding allows only below "
        "the images' %s (%s): use a kernel size of at most %s" % (name, k, k // 2, side_name, side, 2 * side - 1)))


@torch.library.register_fake("prefetch::gaussian_blur")
def _gaussian_blur_fake(images, kernel_x, kernel_y):
    check_uint8_images("gaussian_blur", images, kernel_x, "kernel_x")
    n, c, h, w = check_uint8_images("gaussian_blur", images, kernel_y, "kernel_y")
    _check_taps(kernel_x, "kernel_x", n, w, "width")
    _check_taps(kernel_y, "kernel_y", n, h, "height")
    torch._check(c * h < 2**31 - 1, lambda: (
        "gaussian_blur: an image's C * H must be below 2^31, got C = %s, H = %s" % (c, h)))
    check_output_size("gaussian_blur", (n, c, h, w), torch.uint8)
    return images.new_empty((n, c, h, w))
