"""The machine's DMI strings, by which a notice source knows its cloud without the network.

Every cloud stamps its VMs' firmware tables (``sys_vendor``, ``chassis_asset_tag``...); cloud-init
and the clouds' own SDKs identify the platform from them. Reading a few small files under
``/sys/class/dmi/id`` never touches the network, so detection costs nothing off-cloud and never
sends a packet to a metadata address that is not there.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DEFAULT_DMI_DIR", "read_dmi"]

DEFAULT_DMI_DIR = "/sys/class/dmi/id"
_DMI_FIELDS = (
    "sys_vendor",
    "product_name",
    "product_version",
    "product_uuid",
    "bios_vendor",
    "board_asset_tag",
    "chassis_asset_tag",
)


def read_dmi(dmi_dir: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """The DMI strings cloud-init identifies clouds by; missing or unreadable fields are ``""``.

    ``dmi_dir`` replaces ``/sys/class/dmi/id`` (tests, and the ``dmi_dir`` setting).
    """
    base = Path(dmi_dir if dmi_dir is not None else DEFAULT_DMI_DIR)
    found: dict[str, str] = {}
    for name in _DMI_FIELDS:
        try:
            found[name] = (base / name).read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            found[name] = ""
    return found
