"""The checkpoint manifest's schema evolution: older and newer writers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from portal.core.errors import PortalError
from portal.core.wire import encode
from portal.storage.manifest import MANIFEST_FORMAT, ChunkEntry, Manifest, decode_manifest


def test_manifest_from_older_writer_without_new_fields_is_readable() -> None:
    old = b'{"job_id":"j","checkpoint_id":"c","created_at":1.0}'
    manifest = decode_manifest(old)
    # It does not say its format: it is format 1 (current writers always say theirs).
    assert manifest.format == 1 and manifest.chunks == [] and manifest.parent is None


def test_manifest_with_unknown_future_fields_is_readable() -> None:
    data = b'{"job_id":"j","checkpoint_id":"c","created_at":1.0,"shiny_new_field":[1,2]}'
    assert decode_manifest(data).job_id == "j"


def test_manifest_from_a_newer_format_is_refused() -> None:
    data = encode(Manifest(format=MANIFEST_FORMAT + 1, job_id="j", checkpoint_id="c", created_at=0))
    with pytest.raises(PortalError, match="newer than this Portal reads"):
        decode_manifest(data)


chunks = st.builds(
    ChunkEntry,
    index=st.integers(0, 10**6),
    fingerprint=st.text(min_size=1, max_size=64),
    size=st.integers(0, 2**40),
    stored_size=st.integers(0, 2**40),
    key=st.text(min_size=1, max_size=80),
)


@given(
    st.builds(
        Manifest,
        job_id=st.text(min_size=1),
        checkpoint_id=st.text(min_size=1),
        created_at=st.floats(0, 2e9),
        chunks=st.lists(chunks, max_size=5),
        total_size=st.integers(0, 2**50),
        parent=st.none() | st.text(min_size=1),
    )
)
def test_manifest_round_trip(manifest: Manifest) -> None:
    assert decode_manifest(encode(manifest)) == manifest
