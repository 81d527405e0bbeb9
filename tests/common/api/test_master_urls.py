"""Master URLs normalised as 0.37's client does (``canonicalize_master_url``), compared with the
reference itself where it is installed, and ``det -m`` refusing a bad one clearly."""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from determined.cli import _render, _session
from determined.common.api import canonicalize_master_url

REPO = pathlib.Path(__file__).resolve().parents[3]
REF_PYTHON = REPO / ".refvenv" / "bin" / "python"

GOOD = {
    "localhost": "http://localhost:8080",
    "localhost:9000": "http://localhost:9000",
    "10.0.0.2": "http://10.0.0.2:8080",
    "http://master": "http://master:80",
    "https://master": "https://master:443",
    "https://master:8443/": "https://master:8443",
    "http://master:8080/det/": "http://master:8080/det",
    "master.example.com/prefix": "http://master.example.com:8080/prefix",
}
BAD = [
    "http://user@master:8080",
    "http://user:pw@master",
    "master:8080?x=1",
    "master#frag",
    "http://",
    "http://:8080",
]


@pytest.mark.parametrize("url,expected", GOOD.items())
def test_canonical_forms(url: str, expected: str) -> None:
    assert canonicalize_master_url(url) == expected


@pytest.mark.parametrize("url", BAD)
def test_bad_urls_say_what_to_fix(url: str) -> None:
    with pytest.raises(ValueError, match="invalid master url") as e:
        canonicalize_master_url(url)
    assert any(w in str(e.value) for w in ("no host", "remove"))


@pytest.mark.skipif(not REF_PYTHON.exists(), reason="no .refvenv: run scripts/setup.sh --tests")
def test_same_answers_as_the_reference() -> None:
    program = (
        "import json, sys, determined\n"
        "print(determined.__file__)\n"
        "from determined.common.api import canonicalize_master_url as c\n"
        "out = {}\n"
        "for u in json.load(sys.stdin):\n"
        "    try: out[u] = c(u)\n"
        "    except ValueError: out[u] = 'ValueError'\n"
        "print(json.dumps(out))\n"
    )
    urls = [*GOOD, *BAD]
    done = subprocess.run(
        [str(REF_PYTHON), "-I", "-c", program],  # -I: the reference, not this tree
        input=json.dumps(urls),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    reference = json.loads(done.stdout.splitlines()[-1])
    assert ".refvenv" in done.stdout.splitlines()[0]
    ours = {}
    for u in urls:
        try:
            ours[u] = canonicalize_master_url(u)
        except ValueError:
            ours[u] = "ValueError"
    assert ours == reference


hosts = st.from_regex(r"[a-z][a-z0-9-]{0,10}(\.[a-z][a-z0-9-]{0,10}){0,2}", fullmatch=True)


@given(
    hosts,
    st.one_of(st.none(), st.integers(1, 65535)),
    st.sampled_from(["", "http://", "https://"]),
    st.sampled_from(["", "/", "/api", "/a/b/"]),
)
def test_canonical_is_stable_and_keeps_host_and_port(
    host: str, port: int | None, scheme: str, path: str
) -> None:
    url = scheme + host + (f":{port}" if port else "") + path
    once = canonicalize_master_url(url)
    assert canonicalize_master_url(once) == once
    default = {"": 8080, "http://": 80, "https://": 443}[scheme]
    assert once.startswith(f"{scheme or 'http://'}{host}:{port or default}")
    assert not once.endswith("/")


def test_det_dash_m_with_a_bad_url_is_a_clear_cli_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_MASTER", "http://admin:secret@master:8080")
    with pytest.raises(_render.CliError, match="remove a user name and a password"):
        _session.master_url(_Args())


class _Args:
    master = None
