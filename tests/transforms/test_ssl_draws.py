"""The self-supervised recipes' composed draws (prefetch.transforms.ssl) follow the papers'
distributions, over many images: each view's crop scale, flip, ColorJitter's probability, factor
ranges and order, grayscale, blur (probability and sigma) and solarization, with the rates
written here from the papers and repositories (not read off the compiled views), and the views
of one image drawn independently. Each rate is checked within 5 standard errors."""
import math

import pytest
import torch

from prefetch.transforms import BatchPosition, ssl
from prefetch.transforms.policies import OP_CODES

N = 20000
H, W = 300, 400
POSITION = BatchPosition(3, 7, 0)
JITTER_CODES = {OP_CODES["Brightness"], OP_CODES["Contrast"], OP_CODES["Color"], OP_CODES["Hue"]}


def close(mask, p):
    rate = float(mask.double().mean())
    assert abs(rate - p) <= 5 * math.sqrt(p * (1 - p) / N) + 1e-12, (rate, p)


def stages(view):
    """The view's compiled stages by kind: the window's draws, the jitter chain's table, and the
    single ops' and the blur's."""
    out = {"window": view.transforms[0].draws(N, H, W, *POSITION)}
    for t in view.transforms[1:]:
        kind = type(t).__name__
        if kind == "PolicyAugment" and t.policy == "chain":
            out["jitter"] = t.draws(N, H, W, *POSITION)
        elif kind == "PolicyAugment" and t.policy == "random_op":
            out[t.options["op"]] = t.draws(N, H, W, *POSITION)
        elif kind == "GaussianBlurAugment":
            out["blur"] = t.draws(N, *POSITION)
    return out


def check_view(view, scale, jitter, blur_p, solarize_p):
    s = stages(view)
    d = s["window"]
    h, w = d.boxes[:, 2].double(), d.boxes[:, 3].double()
    area = h * w / (H * W)
    # (torchvision rounds the window's sides, which moves its area by up to ~1/100 here)
    assert float(area.min()) >= scale[0] - 0.01 and float(area.max()) <= scale[1] + 0.01
    assert float(torch.quantile(area, 0.01)) < scale[0] + 0.1 * (scale[1] - scale[0])
    ratio = (w / h).log()
    assert float(ratio.min()) >= math.log(3 / 4) - 0.05 and float(ratio.max()) <= math.log(4 / 3) + 0.05
    close(d.hflip, 0.5)
    # ColorJitter under RandomApply(p=0.8): the four factors in a random order per image
    table = s["jitter"]
    applied = (table.ops != 0).any(dim=1)
    close(applied, 0.8)
    ops = table.ops[applied]
    assert all(set(row) == JITTER_CODES for row in ops.tolist())
    first = ops[:, 0]
    for code in JITTER_CODES:
        rate = float((first == code).double().mean())
        assert abs(rate - 0.25) < 5 * math.sqrt(0.25 * 0.75 / ops.shape[0])
    bound = {OP_CODES["Brightness"]: jitter[0], OP_CODES["Contrast"]: jitter[1],
             OP_CODES["Color"]: jitter[2], OP_CODES["Hue"]: jitter[3]}
    mags = table.magnitudes[applied]
    for code, b in bound.items():
        m = mags[ops == code].double()
        assert float(m.abs().max()) <= b + 1e-6 and float(m.abs().max()) > 0.98 * b
        assert abs(float(m.mean())) < 5 * b / math.sqrt(3 * m.numel())   # uniform in [-b, b]
        assert abs(float(m.var()) - b * b / 3) < 0.05 * b * b
    close(s["RandomGrayscale"].ops[:, 0] != 0, 0.2)
    blur = s["blur"]
    if blur_p < 1:
        close(blur.applied, blur_p)
    else:
        assert bool(blur.applied.all())
    sig = blur.sigma[blur.applied].double()
    assert float(sig.min()) >= 0.1 and float(sig.max()) <= 2.0 and abs(float(sig.mean()) - 1.05) < 0.02
    if solarize_p:
        close(s["RandomSolarize"].ops[:, 0] != 0, solarize_p)
    else:
        assert "RandomSolarize" not in s


def test_dino_multi_crop_draws():
    # DINO's DataAugmentationDINO: global crops scale (0.4, 1), jitter (0.4, 0.4, 0.2, 0.1) at
    # 0.8, grayscale 0.2; blur 1.0 on the first global view, 0.1 and solarize 0.2 on the second,
    # 0.5 on the local ones (scale (0.05, 0.4))
    mv = ssl.dino_views(seed=5)
    jitter = (0.4, 0.4, 0.2, 0.1)
    check_view(mv.views[0], (0.4, 1.0), jitter, 1.0, 0.0)
    check_view(mv.views[1], (0.4, 1.0), jitter, 0.1, 0.2)
    for view in mv.views[2:4]:
        check_view(view, (0.05, 0.4), jitter, 0.5, 0.0)


def test_byol_simclr_swav_draws():
    jitter = (0.4, 0.4, 0.2, 0.1)
    a, b = ssl.byol_views(seed=6).views  # BYOL table 6: blur 1.0 / 0.1, solarize 0 / 0.2
    check_view(a, (0.08, 1.0), jitter, 1.0, 0.0)
    check_view(b, (0.08, 1.0), jitter, 0.1, 0.2)
    for view in ssl.simclr_views(seed=7).views:  # SimCLR appendix A: strength 1, blur 0.5
        check_view(view, (0.08, 1.0), (0.8, 0.8, 0.8, 0.2), 0.5, 0.0)
    sw = ssl.swav_views(seed=8).views  # SwAV: (0.14, 1) and (0.05, 0.14), jitter 0.8
    check_view(sw[0], (0.14, 1.0), (0.8, 0.8, 0.8, 0.2), 0.5, 0.0)
    check_view(sw[2], (0.05, 0.14), (0.8, 0.8, 0.8, 0.2), 0.5, 0.0)


@pytest.mark.parametrize("make", [ssl.dino_views, ssl.simclr_views])
def test_the_views_of_one_image_draw_independently(make):
    views = make(seed=9).views
    a, b = stages(views[0]), stages(views[1])
    close(a["window"].hflip == b["window"].hflip, 0.5)
    ja, jb = (a["jitter"].ops != 0).any(1), (b["jitter"].ops != 0).any(1)
    close(ja & jb, 0.64)
    assert not torch.equal(a["window"].boxes, b["window"].boxes)
