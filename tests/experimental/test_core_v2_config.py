"""core_v2's pure parts: reading ``checkpoint_storage`` arguments into config sections, 0.37's
rule for merging ``config``/``defaults``/``unmanaged``, the master's reading of the config
0.37's client sends (nulls mean absent), and the errors for calls that cannot work."""

from __future__ import annotations

import os
import warnings

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from determined.common import storage
from determined.common.api import Session
from determined.experimental import core_v2
from determined.experimental.core_v2 import _config, _context, _unmanaged
from determined.master import experiment
from determined.master.experiment import _config as _master_config

segment = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="/#?%:\\"),
    min_size=1,
    max_size=8,
)
buckets = st.from_regex(r"[a-z0-9][a-z0-9.-]{1,20}", fullmatch=True)
paths = st.lists(segment, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts))


@given(paths)
def test_a_path_is_shared_fs_there(path: str) -> None:
    section = _context.storage_config(path)
    assert section == {"type": "shared_fs", "host_path": os.path.abspath(path)}
    assert _context.storage_config("file://" + path) == section
    manager = storage.build(section)
    assert str(manager.base_path) == os.path.abspath(path)  # type: ignore[attr-defined]


@given(st.sampled_from(["s3", "gs"]), buckets, st.lists(segment, max_size=3))
def test_cloud_urls_name_their_bucket_and_prefix(
    scheme: str, bucket: str, parts: list[str]
) -> None:
    prefix = "/".join(parts)
    section = _context.storage_config(f"{scheme}://{bucket}/{prefix}")
    expected = {"type": "s3" if scheme == "s3" else "gcs", "bucket": bucket}
    if prefix:
        expected["prefix"] = prefix
    assert section == expected


def test_storage_defaults_and_refusals() -> None:
    assert _context.storage_config(None)["type"] == "shared_fs"
    given_dict = {"type": "s3", "bucket": "b"}
    assert _context.storage_config(given_dict) == given_dict
    for bad in ("ftp://host/x", "s3:///no-bucket", "file://host/x"):
        with pytest.raises(ValueError, match="checkpoint_storage"):
            _context.storage_config(bad)


def test_merge_follows_037() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        defaults = core_v2.DefaultConfig(name="d", project="mine")
        unmanaged = core_v2.UnmanagedConfig(
            project="theirs", external_experiment_id="e", external_trial_id="t"
        )
    config = core_v2.Config(name="c")
    assert _config.merge(config, defaults, unmanaged) is config
    merged = _config.merge(None, defaults, unmanaged)
    assert merged is not None
    assert (merged.name, merged.project) == ("d", "mine")  # defaults' own values win
    assert (merged.external_experiment_id, merged.external_trial_id) == ("e", "t")
    assert _config.merge(None, None, unmanaged) is unmanaged
    assert _config.merge(None, None, None) is None
    with pytest.warns(FutureWarning, match="core_v2.Config"):
        core_v2.DefaultConfig(name="x")


OPTIONAL = ["data", "description", "labels", "workspace", "project", "hparams"]


@given(st.sets(st.sampled_from(OPTIONAL)))
def test_nulls_in_the_037_config_mean_absent(nulls: set[str]) -> None:
    base = {
        "name": "n",
        "reproducibility": {"experiment_seed": 7},
        "searcher": {"name": "single", "metric": "unmanaged", "max_length": 100000000},
        "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp/x"},
    }
    with_nulls = dict(base, **{k: None for k in sorted(nulls)})
    a = experiment.parse_unmanaged_config(yaml.safe_dump(with_nulls))
    b = experiment.parse_unmanaged_config(yaml.safe_dump(base))
    assert a == b
    assert a.entrypoint == _master_config.UNMANAGED_ENTRYPOINT


def test_calls_that_cannot_work_say_why() -> None:
    with pytest.raises(RuntimeError, match="core_v2.init"):
        core_v2.url_reverse_webui_exp_view()
    # Checked before any request: the session's master is never contacted.
    with pytest.raises(ValueError, match="external_experiment_id"):
        _unmanaged.register(
            Session("http://127.0.0.1:9", "t", token_kind="user"),
            {},
            hparams=None,
            external_experiment_id=None,
            external_trial_id="t",
            distributed=None,
        )
    with pytest.raises(TypeError, match="Determined"):
        core_v2.init(config=core_v2.Config(), client=object())
