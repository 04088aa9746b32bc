"""Test-session settings: the compiled-model cache lives in a fresh temporary folder, so tests
never read or write the user's cache and always exercise a build first."""

import contextlib
import io
import json
import os
import tempfile

import pytest

_CACHE = tempfile.TemporaryDirectory(prefix="moesym-test-cache-")
os.environ["MOESYM_CACHE_DIR"] = _CACHE.name


@pytest.fixture
def cli_json():
    """Run ``moesym ARGV --json`` in-process: the parsed object (exit code 0 asserted)."""
    from moesym.cli import main

    def run(argv):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = main(list(argv) + ["--json"])
        assert rc == 0
        return json.loads(buf.getvalue())

    return run
