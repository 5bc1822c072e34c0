"""Ray Data as a source: every sample of a dataset arrives once per epoch, intact, whether the
Prefetcher is given the dataset or a RaySource; what RaySource cannot read is refused. Ray is an
optional extra: these tests skip without it (CI installs it)."""
import pytest
import torch

import prefetch


def _expected_image(i, size=6):
    """The image the Ray preprocessing makes for sample i (recomputed here, independently)."""
    base = (torch.arange(size * size * 3, dtype=torch.int64) * 7 + i * 31) % 256
    return base.to(torch.uint8).view(size, size, 3)


@pytest.fixture(scope="module")
def ray_runtime():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=150 * 2**20,
             log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def test_ray_dataset_every_sample_arrives_once_intact(ray_runtime):
    import numpy as np

    ray = ray_runtime
    n, size = 300, 6

    def preprocess(batch):  # runs in Ray workers: the "decoding" scaled out over the cluster
        ids = batch["id"]
        flat = (np.arange(size * size * 3, dtype=np.int64)[None, :] * 7 + ids[:, None] * 31) % 256
        return {"image": flat.astype(np.uint8).reshape(-1, size, size, 3), "id": ids}

    ds = ray.data.range(n, override_num_blocks=6).map_batches(preprocess)
    for source, batch_size in ((ds, 256), (prefetch.ray.RaySource(ds, batch_size=32), 32)):
        seen = []
        with prefetch.Prefetcher(source, depth=2) as pf:
            for epoch in range(2):
                ids_this_epoch = []
                for batch in pf:
                    assert set(batch) == {"image", "id"}
                    assert batch["image"].dtype == torch.uint8 and batch["image"].shape[1:] == (size, size, 3)
                    assert batch["image"].shape[0] <= batch_size
                    for img, i in zip(batch["image"], batch["id"].tolist()):
                        assert torch.equal(img, _expected_image(i, size)), i
                    ids_this_epoch.extend(batch["id"].tolist())
                assert sorted(ids_this_epoch) == list(range(n))  # every sample once per epoch
                seen.append(ids_this_epoch)


def test_ray_source_refuses_what_it_cannot_read(ray_runtime):
    ds = ray_runtime.data.range(10)
    with pytest.raises(TypeError, match="needs a Ray Dataset"):
        prefetch.ray.RaySource([1, 2, 3])
    with pytest.raises(ValueError, match="batch_format='pandas' is not supported"):
        prefetch.ray.RaySource(ds, batch_format="pandas")
    with pytest.raises(KeyError, match=r"no column\(s\) \['image'\]; it has \['id'\]"):
        list(prefetch.Prefetcher(prefetch.ray.RaySource(ds, columns=["image"])))
