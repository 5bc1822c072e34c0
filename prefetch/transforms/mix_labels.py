"""The label forms the mixing transforms (:class:`~prefetch.transforms.RollMix`,
:class:`~prefetch.transforms.MixUpCutMix`) take, and what each becomes before it is mixed: one
reading of a label leaf for both, so they accept and refuse the same forms.

- class indices: an integer tensor ``[N]`` of any integer dtype (uint8 to int64), each in
  ``[0, num_classes)`` — ``num_classes`` required; one-hot float32 targets ``[N, num_classes]``
  (torchvision's ``one_hot(labels).float()``; timm's ``one_hot`` of ``labels.long()``);
- one-hot or multi-hot labels: an integer or bool tensor ``[N, K]``, float32 from there on (as
  torchvision's ``_mixup_label`` turns a non-float label into float);
- soft labels (label smoothing, distillation, an earlier mix): a float tensor ``[N, K]`` of any
  float dtype, mixed in float32 for float16 and bfloat16 (rounded once at the end, to their
  dtype) and in their own dtype otherwise; the targets keep the labels' dtype, as
  torchvision's keep it.

``num_classes`` is optional for ``[N, K]`` labels (torchvision 0.20+); given, it must equal K.
Refused, each naming what to pass instead: ``[N, 1]`` integer labels (a column of class
indices, which torchvision would take for probabilities of one class: ``labels.view(-1)``), float
``[N]`` labels (class indices must be integers: ``labels.long()``), bool ``[N]``, complex labels,
any other shape.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from .contract import LeafKey, describe_tensor

__all__ = ["mixable_labels"]


def mixable_labels(labels: torch.Tensor, n: int, num_classes: Optional[int], who: str,
                   key: LeafKey) -> Tuple[str, torch.Tensor, torch.dtype]:
    """A label leaf read as the mixing transforms take it (the forms: the module docstring).

    Args:
        labels (Tensor[N] integer, or Tensor[N, K]): the label leaf.
        n (int): the batch's number of images.
        num_classes (int, optional): the label space; needed for class indices.
        who (str): the transform, for an error message.
        key: the label leaf's key, for an error message.

    Returns:
        tuple: ``("index", Tensor[n] int64, torch.float32)`` for class indices (checked in
        ``[0, num_classes)`` where they are on the CPU: reading a device's would synchronise), or
        ``("dense", y, dtype)`` for one-hot and soft labels: ``y`` ``Tensor[n, K]`` in the float
        dtype the mixing computes in, ``dtype`` the targets' dtype.

    Raises:
        ValueError: any other form (naming it and what to pass instead), class indices
            without ``num_classes`` or outside ``[0, num_classes)``, ``[N, K]`` labels whose K
            differs from ``num_classes``.
    """
    forms = ("integer class indices [%d] (with num_classes), or one-hot or soft labels [%d, K]"
             % (n, n))
    if not isinstance(labels, torch.Tensor):
        raise ValueError("prefetch: %s takes %s at leaf %r, got %s"
                         % (who, forms, key, describe_tensor(labels)))
    if labels.is_complex():
        raise ValueError("prefetch: %s takes %s at leaf %r, got complex labels (%s)"
                         % (who, forms, key, describe_tensor(labels)))
    if labels.dim() == 0 or labels.shape[0] != n or labels.dim() > 2:
        raise ValueError("prefetch: %s takes %s at leaf %r, got %s" % (
            who, forms, key, describe_tensor(labels)))
    integer = not labels.is_floating_point() and labels.dtype != torch.bool
    if labels.dim() == 1:
        if not integer:
            what = ("bool labels; pass class indices as integers" if labels.dtype == torch.bool
                    else "%s labels [%d]; class indices must be integers (labels.long()), soft "
                         "labels [%d, K]" % (str(labels.dtype).replace("torch.", ""), n, n))
            raise ValueError("prefetch: %s takes %s at leaf %r, got %s" % (who, forms, key, what))
        if num_classes is None:
            raise ValueError("prefetch: %s needs num_classes for class-index labels [%d] at leaf "
                             "%r (their one-hot targets have num_classes columns); or pass "
                             "one-hot labels [%d, K]" % (who, n, key, n))
        _check_range(labels, num_classes, who)
        return "index", labels.long(), torch.float32
    k = labels.shape[1]
    if (integer or labels.dtype == torch.bool) and k == 1 and num_classes != 1:
        raise ValueError("prefetch: %s: the labels at leaf %r are integers [%d, 1], a column of "
                         "class indices: pass labels.view(-1) (with num_classes), or one-hot "
                         "labels [%d, num_classes]" % (who, key, n, n))
    if num_classes is not None and k != num_classes:
        raise ValueError("prefetch: %s: the labels at leaf %r have K = %d classes ([%d, %d]) but "
                         "num_classes = %d; pass num_classes=%d or None (it is optional for "
                         "[N, K] labels)" % (who, key, k, n, k, num_classes, k))
    if not labels.is_floating_point():
        return "dense", labels.to(torch.float32), torch.float32
    if labels.dtype in (torch.float16, torch.bfloat16):
        return "dense", labels.to(torch.float32), labels.dtype
    return "dense", labels, labels.dtype


def _check_range(labels, num_classes, who):
    """Class indices in ``[0, num_classes)``, where they are on the CPU (on a GPU the one-hot
    scatter asserts on the device instead: no host read-back)."""
    if labels.device.type != "cpu" or labels.numel() == 0:
        return
    bad = ((labels < 0) | (labels >= num_classes)).nonzero()
    if len(bad):
        k = int(bad[0])
        raise ValueError("prefetch: %s: label %d of sample %d is outside [0, num_classes = %d)"
                         % (who, int(labels[k]), k, num_classes))
