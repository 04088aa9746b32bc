"""On-disk cache of compiled models: generated NumPy source keyed by what determines it.

A compiled model (:class:`moesym.numeric.compiled.CompiledModel`) is plain data: Python source plus the
argument and output names of each function and the numbers fixed by the model, hardware and
deployment. Stored as one JSON file per key, it lets a repeated question skip SymPy entirely.
``moesym derive`` stores its answers here too (:func:`moesym.cli.derive.answered`: the printed
record of each question, keyed by its flags and specs), since solving a closed form is SymPy's
work from end to end. Next to them: numeric tables a step model is built from (the EPLB
imbalance table, :func:`moesym.routing.zipf.rank_imbalance_table`) and each compiled model's
Python bytecode (:func:`code`); never SymPy objects (a pickled expression can read back with
another structure than a fresh build).

Where: ``$MOESYM_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/moesym``, else ``~/.cache/moesym``.
Off: ``--no-cache`` on the command line, ``MOESYM_NO_CACHE=1``, or :func:`disable`.

The key is a SHA-256 of the package's own source (every ``.py`` and ``.toml`` file inside the
moesym package, so an upgrade or a local edit changes it; hardware and model files enter through
the specs the caller describes), the entry format and the caller's description of the structure. An
entry carries a digest of its own content: a corrupt, truncated, edited or foreign file is
ignored and rebuilt, never trusted. A cache directory that cannot be written gives one warning
and the run goes on without the cache.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import sys
import tempfile
import warnings
from pathlib import Path

__all__ = ["FORMAT", "cache_dir", "code", "disable", "enabled", "key_for", "load", "store",
           "package_fingerprint"]

FORMAT = 1  # entry layout version
_state = {"disabled": False, "warned": False, "fingerprint": None}


def disable(off: bool = True) -> None:
    """Turn the disk cache off (or back on) for this process (``--no-cache``)."""
    _state["disabled"] = off


def enabled() -> bool:
    return not _state["disabled"] and os.environ.get("MOESYM_NO_CACHE", "") in ("", "0")


def cache_dir() -> Path:
    """The folder entries live in (not created here)."""
    if os.environ.get("MOESYM_CACHE_DIR"):
        return Path(os.environ["MOESYM_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "moesym"


def package_fingerprint() -> str:
    """SHA-256 over the package's Python sources and the TOML data inside the package (the
    overlap schedules), names and bytes, computed once per process."""
    if _state["fingerprint"] is None:
        root = Path(__file__).resolve().parents[1]
        h = hashlib.sha256()
        for p in sorted([*root.rglob("*.py"), *root.rglob("*.toml")]):
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
        _state["fingerprint"] = h.hexdigest()
    return _state["fingerprint"]


def key_for(description: str) -> str:
    """Cache key of a structure described by ``description`` (a deterministic repr)."""
    h = hashlib.sha256()
    for part in (str(FORMAT), package_fingerprint(), description):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _digest(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def load(key: str) -> dict | None:
    """The payload stored under ``key``, or None (absent, disabled, unreadable, corrupt, stale)."""
    if not enabled():
        return None
    path = cache_dir() / f"{key}.json"
    try:
        entry = json.loads(path.read_text())
        payload = entry["payload"]
        if entry.get("format") != FORMAT or entry.get("key") != key \
                or entry.get("digest") != _digest(payload):
            return None
        return payload
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(key: str, payload: dict) -> None:
    """Write ``payload`` under ``key`` atomically; warn once and carry on if that fails."""
    if not enabled():
        return
    folder = cache_dir()
    entry = {"format": FORMAT, "key": key, "digest": _digest(payload), "payload": payload}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(entry, f)
            os.replace(tmp, folder / f"{key}.json")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        if not _state["warned"]:
            _state["warned"] = True
            warnings.warn(f"cache directory {folder} is not writable ({exc.strerror or exc}); "
                          "running without the compiled-model cache (set MOESYM_CACHE_DIR to a "
                          "writable folder, or pass --no-cache)", stacklevel=2)


def code(source: str, filename: str):
    """``compile(source, filename, "exec")``, its bytecode kept here (``marshal``, keyed by the
    source, the file name and the interpreter's bytecode version, with a digest of its own: a
    corrupt or foreign file is compiled again). Compiling a step model's generated source takes
    a tenth of a second or more; reading its bytecode back a millisecond. Not kept when the
    cache is off or cannot be written."""
    if not enabled():
        return compile(source, filename, "exec")
    h = hashlib.sha256()
    for part in (str(FORMAT), sys.implementation.cache_tag or "", filename, source):
        h.update(part.encode())
        h.update(b"\0")
    path = cache_dir() / f"{h.hexdigest()}.code"
    try:
        data = path.read_bytes()
        if hashlib.sha256(data[32:]).digest() == data[:32]:
            return marshal.loads(data[32:])
    except (OSError, ValueError, EOFError, TypeError):
        pass
    out = compile(source, filename, "exec")
    body = marshal.dumps(out)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".code")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(hashlib.sha256(body).digest() + body)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass  # store() says once that the folder cannot be written
    return out
