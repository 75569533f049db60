"""The plugin manager factory and the typed facade callers go through.

``get_plugin_manager()`` builds a fresh pluggy manager each call (none is created at import):
hook specs, then the ``portal`` entry-point group unless ``PORTAL_DISABLE_PLUGIN_AUTOLOAD`` is
set. Core registers no plugin of its own: even Portal's sources for one machine (``local``,
``sigterm``, in portal-providers-base) come through their entry points, as a third party's do. A plugin that fails to import is reported with its
distribution, entry point and error, and skipped: one broken plugin never takes the host down.

Callers use :class:`Plugins` (``Plugins(pm).notice_sources()``...), never ``pm.hook`` directly,
so duplicate names are refused in one place, naming both distributions.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import attrs
import pluggy

from portal.core import hookspecs
from portal.core.errors import PluginError
from portal.core.specs import (
    CaptureExtensionSpec,
    CatalogSpec,
    KeyStore,
    NoticeSourceSpec,
    PlacementPolicySpec,
    SerializerSpec,
    SettingSpec,
    StorageBackendSpec,
    normalise_name,
)

__all__ = [
    "DISABLED_PLUGINS_ENV",
    "DISABLE_AUTOLOAD_ENV",
    "ENTRY_POINT_GROUP",
    "PluginLoadFailure",
    "Plugins",
    "PortalPluginManager",
    "call_factory",
    "get_plugin_manager",
    "lazy_exports",
]

log = logging.getLogger("portal.plugins")

ENTRY_POINT_GROUP = "portal"
DISABLE_AUTOLOAD_ENV = "PORTAL_DISABLE_PLUGIN_AUTOLOAD"
DISABLED_PLUGINS_ENV = "PORTAL_DISABLE_PLUGINS"

_FALSY = {"", "0", "false", "no", "off"}

T = TypeVar("T")


@attrs.frozen(kw_only=True)
class PluginLoadFailure:
    """A plugin that could not be loaded: which distribution, which entry point, and why."""

    distribution: str
    entry_point: str
    error: str

    def describe(self) -> str:
        return (
            f"plugin {self.entry_point!r} from distribution {self.distribution!r} failed to load "
            f"and was skipped: {self.error}. Fix or uninstall {self.distribution}, or block it "
            f"with {DISABLED_PLUGINS_ENV}={self.entry_point}"
        )


class PortalPluginManager(pluggy.PluginManager):
    """pluggy's manager with Portal's hook specs, and what loading the installed plugins found:
    the ones that failed (``load_failures``) and the distribution behind each entry point
    (``distributions``: name -> (distribution, version)). An embedder may build one, register
    its own plugins and hand it to :class:`Plugins` (and so to ``portal.jobs.Portal.open``)."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT)
        self.add_hookspecs(hookspecs)
        self.load_failures: list[PluginLoadFailure] = []
        self.distributions: dict[str, tuple[str, str]] = {}


def _blocked_from_env(environ: Mapping[str, str]) -> set[str]:
    raw = environ.get(DISABLED_PLUGINS_ENV, "")
    return {normalise_name(part) for part in raw.split(",") if part.strip()}


def get_plugin_manager(
    *,
    autoload: bool = True,
    blocked: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
) -> PortalPluginManager:
    """A new plugin manager with Portal's hook specs and (optionally) the installed plugins.

    :param autoload: load the ``portal`` entry-point group. ``PORTAL_DISABLE_PLUGIN_AUTOLOAD``
        (any value but ``0``/``false``/``no``/``off``) turns it off regardless.
    :param blocked: plugin (entry point) names never to load, in addition to the comma-separated
        ``PORTAL_DISABLE_PLUGINS``.
    :param environ: the environment to read (default :data:`os.environ`).
    """
    env = os.environ if environ is None else environ
    blocked_names = {normalise_name(b) for b in blocked} | _blocked_from_env(env)

    pm = PortalPluginManager()
    if autoload and env.get(DISABLE_AUTOLOAD_ENV, "").strip().lower() in _FALSY:
        _load_entry_points(pm, blocked_names, pm.load_failures, pm.distributions)

    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(
            f"{exc}. Portal's hooks are named portal_*; see portal.core.hookspecs for their names "
            "and arguments, and fix or uninstall the plugin that implements it"
        ) from exc
    return pm


def _register(pm: pluggy.PluginManager, plugin: object, name: str) -> None:
    try:
        pm.register(plugin, name=name)
    except pluggy.PluginValidationError as exc:
        raise PluginError(
            f"plugin {name!r} does not match Portal's hook specifications: {exc}. A hook "
            "implementation may take only the arguments its spec names (see portal.core.hookspecs)",
            details={"plugin": name},
        ) from exc
    except ValueError as exc:  # registered twice under one name
        raise PluginError(f"plugin {name!r} could not be registered: {exc}") from exc


def _load_entry_points(
    pm: pluggy.PluginManager,
    blocked: set[str],
    failures: list[PluginLoadFailure],
    distributions: dict[str, tuple[str, str]],
) -> None:
    # Imported here: importlib.metadata is a third of this module's import cost, and a host that
    # builds a manager without autoload (an embedding scheduler, the runtime's tests) never needs it.
    from importlib import metadata

    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if normalise_name(ep.name) in blocked or pm.has_plugin(ep.name):
            continue
        dist = ep.dist.name if ep.dist is not None else "<unknown distribution>"
        version = ep.dist.version if ep.dist is not None else ""
        try:
            plugin = ep.load()
        except Exception as exc:  # any import error of a third party must not stop the host
            failure = PluginLoadFailure(
                distribution=dist, entry_point=ep.name, error=f"{type(exc).__name__}: {exc}"
            )
            failures.append(failure)
            log.warning("%s", failure.describe())
            continue
        _register(pm, plugin, ep.name)
        distributions[ep.name] = (dist, version)


SpecT = TypeVar(
    "SpecT",
    NoticeSourceSpec,
    StorageBackendSpec,
    SerializerSpec,
    CaptureExtensionSpec,
    PlacementPolicySpec,
    CatalogSpec,
    SettingSpec,
)


#: The hooks ``Plugins.inventory`` lists, with what each registers.
_INVENTORY = (
    ("portal_notice_sources", "notice source"),
    ("portal_storage_backends", "storage backend"),
    ("portal_serializers", "serializer"),
    ("portal_capture_extensions", "capture extension"),
    ("portal_placement_policies", "placement policy"),
    ("portal_catalogs", "catalog"),
    ("portal_settings", "setting"),
)
#: Hooks that answer or observe rather than register: listed once per implementing plugin.
_ANSWERING = (
    ("portal_key_store", "key store", "supplies the store of job keys"),
    ("portal_machine_exists", "machine check", "says whether a silent job's machine still exists"),
    ("portal_machine_vcpus", "vCPU listing", "lists a machine type's vCPUs no catalog knows"),
    ("portal_job_listings", "job listing", "lists another tool's jobs beside Portal's"),
    ("portal_event", "event observer", "is told of every job event"),
)


class Plugins:
    """Typed access to a plugin manager's hooks.

    Registration hooks are collected plugin by plugin so that two plugins registering the same
    name are refused with both distributions named.
    """

    def __init__(self, pm: pluggy.PluginManager) -> None:
        """Over ``pm``: a :class:`PortalPluginManager` (:func:`get_plugin_manager`), or any
        pluggy manager with Portal's hook specs (nothing is then known of distributions)."""
        self.pm = pm
        portal_pm = pm if isinstance(pm, PortalPluginManager) else None
        self._failures = portal_pm.load_failures if portal_pm else []
        self._distributions = portal_pm.distributions if portal_pm else {}

    @classmethod
    def load(cls, *, autoload: bool = True, blocked: Iterable[str] = ()) -> Plugins:
        return cls(get_plugin_manager(autoload=autoload, blocked=blocked))

    @property
    def load_failures(self) -> list[PluginLoadFailure]:
        """Plugins that failed to load (each already logged once)."""
        return list(self._failures)

    def distribution_of(self, plugin_name: str) -> str:
        known = self._distributions
        return known[plugin_name][0] if plugin_name in known else f"plugin {plugin_name!r}"

    def plugins(self) -> list[dict[str, Any]]:
        """Each plugin registered, for people (``portal plugins``): its name (the entry point's),
        the distribution that ships it and that distribution's version, and the hooks it
        implements, so a bug report can say exactly what was installed. A plugin the host
        registered itself (no entry point) has no distribution to name."""
        known = self._distributions
        rows: list[dict[str, Any]] = []
        for name, plugin in sorted(self.pm.list_name_plugin(), key=lambda pair: str(pair[0])):
            if plugin is None or name is None:  # blocked by name: never loaded
                continue
            distribution, version = known.get(name, ("", ""))
            hooks = sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or ())
            rows.append(
                {"name": name, "distribution": distribution, "version": version, "hooks": hooks}
            )
        return rows

    def _collect(self, hook_name: str, kind: str, spec_type: type[SpecT]) -> dict[str, SpecT]:
        caller = getattr(self.pm.hook, hook_name)
        seen: dict[str, tuple[SpecT, str]] = {}
        # get_hookimpls() lists trylast implementations first, then in registration order.
        for impl in caller.get_hookimpls():
            owner = self.distribution_of(impl.plugin_name)
            try:
                specs = impl.function() or []
            except Exception as exc:
                raise PluginError(
                    f"{owner} failed in {hook_name}: {type(exc).__name__}: {exc}",
                    details={"plugin": impl.plugin_name, "hook": hook_name},
                ) from exc
            for spec in specs:
                if not isinstance(spec, spec_type):
                    raise PluginError(
                        f"{owner} returned {type(spec).__name__} from {hook_name}; expected "
                        f"{spec_type.__name__} objects"
                    )
                key = normalise_name(spec.name)
                if key in seen:
                    other = seen[key][1]
                    raise PluginError(
                        f"two plugins register the {kind} {spec.name!r}: {other} and {owner}. "
                        f"Uninstall one, or block one with {DISABLED_PLUGINS_ENV}=<entry point name>",
                        details={"name": spec.name, "distributions": [other, owner]},
                    )
                seen[key] = (spec, owner)
        return {key: spec for key, (spec, _owner) in seen.items()}

    def inventory(self) -> list[dict[str, str]]:
        """Every registration of every plugin, for people (``portal plugins``): its kind, name,
        distribution and description; a plugin that fails in a hook is listed with the error,
        never raised, so that one broken plugin does not hide the others."""
        rows: list[dict[str, str]] = []
        for hook_name, kind in _INVENTORY:
            for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
                owner = self.distribution_of(impl.plugin_name)
                try:
                    specs = list(impl.function() or [])
                except Exception as exc:
                    rows.append(
                        {
                            "kind": kind,
                            "name": "?",
                            "distribution": owner,
                            "error": f"{type(exc).__name__}: {exc}",
                        }
                    )
                    continue
                for spec in specs:
                    rows.append(
                        {
                            "kind": kind,
                            "name": str(getattr(spec, "name", "?")),
                            "distribution": owner,
                            "description": str(getattr(spec, "description", "")),
                        }
                    )
        for hook_name, kind, what in _ANSWERING:
            for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
                rows.append(
                    {
                        "kind": kind,
                        "name": impl.plugin_name,
                        "distribution": self.distribution_of(impl.plugin_name),
                        "description": f"{hook_name}: {what}",
                    }
                )
        return rows

    def notice_sources(self) -> dict[str, NoticeSourceSpec]:
        return self._collect("portal_notice_sources", "notice source", NoticeSourceSpec)

    def storage_backends(self) -> dict[str, StorageBackendSpec]:
        return self._collect("portal_storage_backends", "storage backend", StorageBackendSpec)

    def serializers(self) -> dict[str, SerializerSpec]:
        return self._collect("portal_serializers", "serializer", SerializerSpec)

    def capture_extensions(self) -> dict[str, CaptureExtensionSpec]:
        return self._collect("portal_capture_extensions", "capture extension", CaptureExtensionSpec)

    def placement_policies(self) -> dict[str, PlacementPolicySpec]:
        return self._collect("portal_placement_policies", "placement policy", PlacementPolicySpec)

    def catalogs(self) -> dict[str, CatalogSpec]:
        return self._collect("portal_catalogs", "catalog", CatalogSpec)

    def settings(self) -> dict[str, SettingSpec]:
        """Every setting a plugin declares, by name (see :mod:`portal.core.settings`)."""
        return self._collect("portal_settings", "setting", SettingSpec)

    def notice_source(self, name: str) -> NoticeSourceSpec:
        return _lookup(self.notice_sources(), name, "notice source")

    def placement_policy(self, name: str) -> PlacementPolicySpec:
        return _lookup(self.placement_policies(), name, "placement policy")

    def storage_backend_for(self, url: str) -> StorageBackendSpec:
        """The backend registered for ``url``'s scheme (a plain path counts as ``file``)."""
        scheme = url.split("://", 1)[0].lower() if "://" in url else "file"
        backends = self.storage_backends()
        for spec in backends.values():
            if scheme in spec.schemes:
                return spec
        known = sorted({s for spec in backends.values() for s in spec.schemes})
        raise PluginError(
            f"no storage backend handles {scheme}:// (in {url!r}); installed schemes: "
            f"{', '.join(known) or 'none'}. Install portal-storage (with the extra for your "
            "cloud, e.g. portal-storage[s3]) or a plugin that registers it"
        )

    def key_store(self, home: str) -> KeyStore | None:
        result: KeyStore | None = self.pm.hook.portal_key_store(home=home)
        return result

    def _first_answer(self, hook: str, args: Mapping[str, Any], what: str) -> Any:
        """The first non-None answer of a one-answer hook, newest plugin first; a plugin that
        fails is logged (``what`` names the question) and counts as no answer."""
        for impl in reversed(getattr(self.pm.hook, hook).get_hookimpls()):
            try:
                answer = impl.function(*[args[arg] for arg in impl.argnames])
            except Exception:
                log.exception("%s of %s failed", what, self.distribution_of(impl.plugin_name))
                continue
            if answer is not None:
                return answer
        return None

    def machine_exists(
        self,
        provider: str,
        machine: str,
        home: str,
        facts: Mapping[str, str] | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> bool | None:
        """The first plugin's answer on whether ``machine`` still exists (see the hook); a
        plugin that fails counts as no answer: a failed question never says that a machine is
        gone."""
        args = {
            "provider": provider,
            "machine": machine,
            "home": home,
            "facts": facts or {},
            "settings": settings or {},
        }
        answer = self._first_answer("portal_machine_exists", args, "machine check")
        return None if answer is None else bool(answer)

    def machine_vcpus(
        self, provider: str, machine_type: str, settings: Mapping[str, Any] | None = None
    ) -> int | None:
        """The first plugin's answer on ``machine_type``'s vCPUs (see the hook); a plugin that
        fails counts as no answer."""
        args = {"provider": provider, "machine_type": machine_type, "settings": settings or {}}
        answer = self._first_answer("portal_machine_vcpus", args, "vCPU listing")
        return None if answer is None else int(answer)

    def job_listings(self, home: str) -> list[dict[str, Any]]:
        """Every plugin's rows of other tools' jobs (see the hook); a plugin that fails, or
        answers with something that is not a list of rows, is logged and lists nothing."""
        rows: list[dict[str, Any]] = []
        for impl in self.pm.hook.portal_job_listings.get_hookimpls():
            try:
                given: Any = impl.function(*[{"home": home}[arg] for arg in impl.argnames])
                answer = list(given or [])
                if not all(isinstance(row, dict) for row in answer):
                    raise TypeError("each row must be a dict of portal jobs --json's keys")
            except Exception:
                log.exception("job listing of %s failed", self.distribution_of(impl.plugin_name))
                continue
            rows.extend(answer)
        return rows

    def emit(self, event: Any) -> None:
        """Tell every ``portal_event`` observer; an observer's failure is logged, never raised."""
        for impl in self.pm.hook.portal_event.get_hookimpls():
            try:
                impl.function(*[{"event": event}[arg] for arg in impl.argnames])
            except Exception:
                log.exception("event observer %s failed", self.distribution_of(impl.plugin_name))


def _lookup(specs: Mapping[str, T], name: str, kind: str) -> T:
    try:
        return specs[normalise_name(name)]
    except KeyError:
        raise PluginError(
            f"no {kind} named {name!r}; installed: {', '.join(sorted(specs)) or 'none'}. "
            "Check the name, or install the package that provides it",
            details={"name": name},
        ) from None


def call_factory(factory: Callable[..., T], *args: Any, what: str) -> T:
    """Call a plugin's factory, turning its failure into a clear :class:`PluginError`."""
    try:
        return factory(*args)
    except PluginError:
        raise
    except Exception as exc:
        raise PluginError(f"{what} could not be created: {type(exc).__name__}: {exc}") from exc


# --- lazy registration ---------------------------------------------------------------------------


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) that imports ``exports[name]`` (a submodule of
    ``package``) on first access: a package's public names without importing all of it when
    one submodule (its plugin) is loaded. Declare the same names under ``TYPE_CHECKING`` for
    type checkers. A name may not also be a submodule's: importing the submodule would set the
    package's attribute to the module (``portal.capture.probe`` is why its module is ``probing``)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
