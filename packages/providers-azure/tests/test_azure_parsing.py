"""Fuzzing the Scheduled Events and instance parsers, the catalog, and the plugin's registration."""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from portal.core.plugins import Plugins, get_plugin_manager
from portal.core.specs import NoticeSourceContext
from portal.providers.azure import catalog, plugin
from portal.providers.azure.notices import AzureNoticeSource
from portal.providers.azure.parsing import parse_compute, parse_not_before, parse_scheduled_events

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=15,
)
event_like = st.fixed_dictionaries(
    {},
    optional={
        "EventId": st.text(max_size=10) | json_values,
        "EventType": st.sampled_from(["Preempt", "Freeze", "Reboot", "Bogus"]) | json_values,
        "Resources": st.lists(st.text(max_size=8), max_size=3) | json_values,
        "NotBefore": st.sampled_from(["", "Mon, 11 Apr 2022 22:26:58 GMT", "soon"]) | json_values,
        "EventStatus": st.sampled_from(["Scheduled", "Started"]) | json_values,
    },
)
documents = st.fixed_dictionaries(
    {
        "DocumentIncarnation": st.integers(min_value=-2, max_value=10**6) | json_values,
        "Events": st.lists(event_like | json_values, max_size=4) | json_values,
    }
)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=300) | documents.map(json.dumps) | json_values.map(json.dumps))
def test_parsers_accept_or_refuse_with_value_error(body: str) -> None:
    try:
        document, _problems = parse_scheduled_events(body)
    except ValueError:
        pass
    else:
        assert all(e.event_id for e in document.events)
    with contextlib.suppress(ValueError):
        parse_compute(body)


@settings(max_examples=100, deadline=None)
@given(st.datetimes(min_value=dt.datetime(1970, 1, 2), max_value=dt.datetime(9000, 1, 1)))
def test_not_before_round_trip(when: dt.datetime) -> None:
    seconds = when.replace(tzinfo=dt.UTC, microsecond=0).timestamp()
    assert parse_not_before(email.utils.formatdate(seconds, usegmt=True)) == seconds


def test_documented_example() -> None:
    body = json.dumps(
        {
            "DocumentIncarnation": 2,
            "Events": [
                {
                    "EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
                    "EventStatus": "Scheduled",
                    "EventType": "Preempt",
                    "ResourceType": "VirtualMachine",
                    "Resources": ["vm-1"],
                    "NotBefore": "Mon, 11 Apr 2022 22:26:58 GMT",
                    "Description": "",
                    "EventSource": "Platform",
                    "DurationInSeconds": 5,
                }
            ],
        }
    )
    document, problems = parse_scheduled_events(body)
    (event,) = document.events
    assert problems == [] and document.incarnation == 2
    assert event.not_before == 1649716018.0 and event.concerns(frozenset({"vm-1"}))
    assert parse_not_before("") is None


def test_catalog() -> None:
    types = catalog.load_machine_types()
    assert len(types) >= 40 and len({t.name for t in types}) == len(types)
    t4 = catalog.find("Standard_NC4as_T4_v3")
    assert t4 is not None and (t4.vcpus, t4.gpus, t4.gpu_model) == (4, 1, "T4")


def test_plugin_registers_the_source_and_the_catalog() -> None:
    pm = get_plugin_manager(autoload=False)
    pm.register(plugin, name="azure")
    plugins = Plugins(pm)
    source = plugins.notice_source("azure").factory(
        NoticeSourceContext(settings={"dmi_dir": "/nonexistent"})
    )
    assert isinstance(source, AzureNoticeSource) and source.detect() is False
    source.close()
    assert "azure" in plugins.catalogs()
