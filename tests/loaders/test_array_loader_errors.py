"""An error raised while an ArrayLoader makes a batch — decoding a store's JPEG, a transform —
names the sample by its index in the arrays (the store's index), whatever the epoch's order and
on both residencies: "sample 1 of batch 0" alone sent the user looking at the wrong file."""
import io

import numpy as np
import pytest
import torch

import prefetch

Image = pytest.importorskip("PIL.Image")

COUNT, BAD = 12, 7


def jpeg(seed):
    rng = np.random.default_rng(seed)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (16, 18, 3), dtype=np.uint8)).save(out, "JPEG")
    return out.getvalue()


def undecodable(data):
    """The JPEG with its quantization table's marker turned into a comment: the header still
    parses (pack takes it), decoding fails ("Quantization table 0x00 was not defined")."""
    data = bytearray(data)
    at = data.find(b"\xff\xdb")
    data[at + 1] = 0xFE
    return bytes(data)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    files = [jpeg(k) for k in range(COUNT)]
    files[BAD] = undecodable(files[BAD])
    return prefetch.pack([(d, k % 3) for k, d in enumerate(files)],
                         tmp_path_factory.mktemp("s") / "store", progress=False)


def notes(exc):
    return "\n".join(getattr(exc, "__notes__", ()))


@pytest.mark.parametrize("resident", ["host", "device"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_a_decode_error_names_the_store_index_of_the_sample(store, resident, shuffle):
    aug = prefetch.FusedAugment((0.5, 0.5, 0.5), (0.25, 0.25, 0.25), random_resized_crop=8,
                                decode=True, seed=0)
    loader = prefetch.ArrayLoader(store, 4, shuffle=shuffle, seed=5, resident=resident,
                                  transform=aug)
    order = loader.epoch_indices(0).tolist()
    position = order.index(BAD)  # where the bad sample lies in this epoch, from the order alone
    batch, k = divmod(position, 4)
    with pytest.raises(RuntimeError, match="sample %d .*cannot be decoded" % k) as info:
        for _ in loader:
            pass
    assert ("sample %d of batch %d is sample %d of the ArrayLoader's arrays" % (k, batch, BAD)
            in notes(info.value)), notes(info.value)
    loader.close()


class FailsOn(prefetch.transforms.Transform):
    """Raises on batch `batch`, its message naming sample `k` or no sample."""

    def __init__(self, batch, message):
        self.batch, self.message = batch, message

    def apply(self, batch, position):
        if position.index == self.batch:
            raise ValueError(self.message)
        return batch


@pytest.mark.parametrize("resident", ["host", "device"])
def test_a_transform_error_names_the_samples_by_their_index_in_the_arrays(resident):
    images = torch.arange(40 * 3, dtype=torch.uint8).view(40, 3)
    labels = torch.arange(40)
    loader = prefetch.ArrayLoader((images, labels), 6, shuffle=True, seed=1, resident=resident,
                                  transform=FailsOn(2, "bad pixels in sample 4"))
    order = loader.epoch_indices(0).tolist()
    with pytest.raises(ValueError, match="bad pixels in sample 4") as info:
        list(loader)
    assert ("sample 4 of batch 2 is sample %d of the ArrayLoader's arrays" % order[2 * 6 + 4]
            in notes(info.value)), notes(info.value)
    # A message naming no sample (or a sample past the batch): the batch's indices.
    for message in ("the batch is wrong", "sample 99 is wrong"):
        loader = prefetch.ArrayLoader((images, labels), 6, shuffle=True, seed=1,
                                      resident=resident, transform=FailsOn(1, message))
        with pytest.raises(ValueError) as info:
            list(loader)
        shown = ", ".join(map(str, order[6:12]))
        assert "batch 1 holds samples %s of the ArrayLoader's arrays" % shown in notes(info.value)
        loader.close()
