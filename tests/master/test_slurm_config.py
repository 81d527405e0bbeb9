"""The master config's ``resource_manager: {type: slurm, ...}`` section: parsed with 0.37's
field names; a bad one stops the master at startup with a message naming the key."""

from __future__ import annotations

import pathlib

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from determined.master.__main__ import parse_args
from determined.master.resources import SlurmConfig, SlurmConfigError
from determined.master.resources._slurm_jobs import _gres_gpus, expand_hostlist

KNOWN = {
    "type",
    "slots_type",
    "gres_supported",
    "default_compute_resource_pool",
    "partition_overrides",
    "sbatch_args",
}


def test_fields_and_defaults() -> None:
    c = SlurmConfig.parse({"type": "slurm"})
    assert (c.slots_type, c.gres_supported, c.gpu) == ("cpu", True, False)
    assert c.default_compute_resource_pool is None and c.partition_overrides == {}
    g = SlurmConfig.parse(
        {
            "type": "slurm",
            "slots_type": "cuda",
            "gres_supported": False,
            "default_compute_resource_pool": "gpu",
            "partition_overrides": {"gpu": {"sbatch_args": ["--qos=high"]}},
        }
    )
    assert g.gpu and g.default_compute_resource_pool == "gpu"


@given(st.text(min_size=1, max_size=12).filter(lambda k: k not in KNOWN))
def test_unknown_keys_are_named(key: str) -> None:
    with pytest.raises(SlurmConfigError, match="unknown keys"):
        SlurmConfig.parse({"type": "slurm", key: 1})


@pytest.mark.parametrize(
    "bad, word",
    [
        ({"slots_type": "tpu"}, "slots_type"),
        ({"gres_supported": "yes"}, "gres_supported"),
        ({"partition_overrides": []}, "partition_overrides"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_master_refuses_a_bad_section(
    tmp_path: pathlib.Path, bad: dict, word: str, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "master.yaml"
    conf.write_text(yaml.safe_dump({"resource_manager": {"type": "slurm", **bad}}))
    with pytest.raises(SystemExit) as e:
        parse_args(["--config-file", str(conf)])
    assert e.value.code == 2
    assert word in capsys.readouterr().err


def test_a_good_section_selects_slurm(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "master.yaml"
    conf.write_text(yaml.safe_dump({"resource_manager": {"type": "slurm", "slots_type": "cpu"}}))
    args = parse_args(["--config-file", str(conf)])
    assert args.resource_manager == "slurm"
    assert args.slurm["slots_type"] == "cpu"


def test_expand_hostlist_and_gres() -> None:
    assert expand_hostlist("n[1-3,05],gpu1") == ["n1", "n2", "n3", "n05", "gpu1"]
    assert expand_hostlist("a[1-2]b,c[3]") == ["a1b", "a2b", "c3"]
    assert expand_hostlist("n1") == ["n1"] and expand_hostlist("") == []
    assert (_gres_gpus("gpu:2"), _gres_gpus("gpu:a100:4(S:0-1)"), _gres_gpus("(null)")) == (2, 4, 0)


@given(
    st.lists(
        st.tuples(st.sampled_from(["n", "gpu", "node-"]), st.integers(0, 40), st.integers(0, 5)),
        min_size=1,
        max_size=6,
    )
)
def test_expand_hostlist_inverts_compression(groups: list[tuple[str, int, int]]) -> None:
    """Compressing ranges the way Slurm prints them and expanding them gives the names back."""
    text = ",".join(f"{p}[{lo}-{lo + n}]" for p, lo, n in groups)
    want = [f"{p}{i}" for p, lo, n in groups for i in range(lo, lo + n + 1)]
    assert expand_hostlist(text) == want
