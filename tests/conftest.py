"""Test-session settings: the compiled-model cache lives in a fresh temporary folder, so tests
never read or write the user's cache and always exercise a build first."""

import os
import tempfile

_CACHE = tempfile.TemporaryDirectory(prefix="moesym-test-cache-")
os.environ["MOESYM_CACHE_DIR"] = _CACHE.name
