"""Job keys (file store, KMS plugins winning) and the storage plugin's registration."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from portal.core.hookspecs import hookimpl
from portal.core.plugins import Plugins, get_plugin_manager
from portal.storage import (
    CheckpointStore,
    FileKeyStore,
    JobKeyExistsError,
    JobKeyMissingError,
    KeyStoreError,
    MemoryKeyStore,
    resolve_key_store,
)
from portal.storage import plugin as storage_plugin
from portal.storage.backend import FsspecBackend, LocalBackend


def test_file_key_store_is_private_and_never_replaces(tmp_path: Path) -> None:
    keys = FileKeyStore(tmp_path / "home")
    key = keys.create("job-1")
    assert len(key) == 32 and keys.get("job-1") == key
    folder, file = tmp_path / "home" / "keys", tmp_path / "home" / "keys" / "job-1.key"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    with pytest.raises(JobKeyExistsError) as exists:
        keys.create("job-1")
    assert exists.value.code == "JOB_KEY_EXISTS" and keys.get("job-1") == key
    with pytest.raises(JobKeyMissingError) as missing:
        keys.get("job-2")
    assert missing.value.code == "JOB_KEY_MISSING" and isinstance(missing.value, KeyError)
    assert "PORTAL_HOME" in str(missing.value)
    os.chmod(file, 0o644)
    with pytest.raises(KeyStoreError, match="chmod 600"):
        keys.get("job-1")
    os.chmod(file, 0o600)
    file.write_bytes(b"short")
    with pytest.raises(KeyStoreError, match="damaged"):
        keys.get("job-1")
    with pytest.raises(ValueError, match="job id"):
        keys.create("../escape")


def test_keys_are_refused_inside_a_local_store(tmp_path: Path) -> None:
    with pytest.raises(KeyStoreError, match="inside the checkpoint store"):
        CheckpointStore(str(tmp_path), FileKeyStore(tmp_path / "home"))
    CheckpointStore(str(tmp_path / "store"), FileKeyStore(tmp_path / "home"))


def test_default_key_store_and_a_kms_plugin_that_wins(tmp_path: Path) -> None:
    pm = get_plugin_manager(autoload=False)
    pm.register(storage_plugin, name="storage")
    assert isinstance(resolve_key_store(tmp_path, Plugins(pm)), FileKeyStore)

    kms = MemoryKeyStore()

    class Kms:
        @hookimpl
        def portal_key_store(self, home: str) -> MemoryKeyStore:
            return kms

    pm.register(Kms(), name="kms")
    assert resolve_key_store(tmp_path, Plugins(pm)) is kms


def test_backend_registration_covers_every_scheme(tmp_path: Path) -> None:
    pm = get_plugin_manager(autoload=False)
    pm.register(storage_plugin, name="storage")
    plugins = Plugins(pm)
    for url in ("s3://b/p", "gs://b/p", "az://c/p", "abfs://c/p", "memory://x", "/tmp/x"):
        assert plugins.storage_backend_for(url).name == "fsspec"
    spec = plugins.storage_backend_for(str(tmp_path))
    assert isinstance(spec.factory(str(tmp_path), {}), LocalBackend)
    assert isinstance(spec.factory("memory://reg", {}), FsspecBackend)


def test_entry_point_is_installed_and_import_is_light() -> None:
    plugins = Plugins.load()
    assert "fsspec" in plugins.storage_backends()
    code = (
        "import sys, portal.storage; "
        "heavy = {'s3fs', 'gcsfs', 'adlfs', 'cryptography', 'fsspec', 'botocore'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
