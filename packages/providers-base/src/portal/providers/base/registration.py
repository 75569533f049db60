"""A provider's registration in a few lines, with nothing of the provider imported until used.

Portal loads every installed plugin's entry point when it builds its plugin manager, so a
provider's ``plugin`` module must cost nothing: :func:`provider_specs` takes the notice source and
the catalog as dotted paths (``"module:attribute.attribute"``, as entry points spell them) and
imports them on the first call of the factory::

    SPECS = provider_specs(
        "acme",
        source="portal_acme.notices:AcmeNoticeSource.from_context",
        catalog="portal_acme.catalog:load_machine_types",
    )

    @hookimpl
    def portal_notice_sources() -> list[NoticeSourceSpec]:
        return list(SPECS.sources)

    @hookimpl
    def portal_catalogs() -> list[CatalogSpec]:
        return list(SPECS.catalogs)

    @hookimpl
    def portal_settings() -> list[SettingSpec]:
        return list(SPECS.settings)

The hook implementations stay written out in the plugin: pluggy would find generated ones too,
but a reader (and grep) should find a provider's hooks where its entry point points.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from typing import Any

import attrs

from portal.core.errors import InvalidArgumentError
from portal.core.specs import CatalogSpec, NoticeSourceSpec, SettingSpec

__all__ = ["LazyFactory", "ProviderSpecs", "provider_specs", "resolve"]

_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def _valid_target(_inst: object, _attr: attrs.Attribute[Any], value: str) -> None:
    if not _TARGET.fullmatch(value) or ".." in value or value.endswith("."):
        raise InvalidArgumentError(
            f"factory path {value!r} is not 'package.module:name' (a name may be dotted, "
            "'Class.from_context'): give it as an entry point spells it"
        )


def resolve(target: str) -> Any:
    """The object ``"package.module:attr.attr"`` names, importing its module."""
    module_name, _, qualname = target.partition(":")
    found: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


@attrs.frozen
class LazyFactory:
    """Calls the object at ``target`` with its arguments, importing it on the first call."""

    target: str = attrs.field(validator=_valid_target)

    def __call__(self, *args: Any) -> Any:
        return resolve(self.target)(*args)


@attrs.frozen(kw_only=True)
class ProviderSpecs:
    """What a provider registers: its notice source, its catalog if it has one, and the settings
    its source reads (``portal_settings``)."""

    sources: tuple[NoticeSourceSpec, ...]
    catalogs: tuple[CatalogSpec, ...]
    settings: tuple[SettingSpec, ...] = ()


def provider_specs(
    provider: str,
    *,
    source: str,
    catalog: str | None = None,
    source_description: str = "",
    catalog_description: str = "",
    settings: Sequence[SettingSpec] = (),
) -> ProviderSpecs:
    """The specs of a provider whose source and catalog are both named ``provider``.

    ``source`` is the dotted path of a ``NoticeSourceContext -> NoticeSource`` callable (usually
    ``Class.from_context``); ``catalog``, if any, of a ``() -> Iterable[MachineType]`` one. Paths
    are checked now (a typo fails at registration) and imported only when called. ``settings``
    are the ones the source reads, each named ``<provider>.<name>``.
    """
    for setting in settings:
        if not setting.name.startswith(f"{provider}."):
            raise InvalidArgumentError(
                f"setting {setting.name!r} of provider {provider!r} must be named "
                f"{provider}.<name>, so that it sits in the [{provider}] table of a settings file"
            )
    source_spec = NoticeSourceSpec(
        name=provider,
        provider=provider,
        factory=LazyFactory(source),
        description=source_description,
    )
    catalogs = (
        ()
        if catalog is None
        else (
            CatalogSpec(
                name=provider,
                provider=provider,
                machine_types=LazyFactory(catalog),
                description=catalog_description,
            ),
        )
    )
    return ProviderSpecs(sources=(source_spec,), catalogs=catalogs, settings=tuple(settings))
