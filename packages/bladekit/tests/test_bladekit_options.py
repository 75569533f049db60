"""Decoration-time validation of every setting, and the request's exact bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import bladekit
from bladekit.wire import FunctionRequest, decode_request, encode_request
from portal.core import errors as core_errors


def body(**settings: object) -> bytes:
    app = bladekit.app("wire-app")

    @app.function(**settings)  # type: ignore[arg-type]
    def f() -> None: ...

    return f.request_body()


def test_defaults_keep_the_body_byte_identical() -> None:
    expected = b'{"app":"wire-app","function":"body.<locals>.f"}'
    assert body() == expected
    assert body(gpu_class="spot", best_effort=False, max_interruptions=None) == expected


@pytest.mark.parametrize(
    ("settings", "extra"),
    [
        ({"gpu": "RTX-A4500"}, b',"gpu":"RTX-A4500"'),
        ({"gpu_class": "reserved"}, b',"gpu_class":"reserved"'),
        ({"best_effort": True}, b',"best_effort":true'),
        ({"max_interruptions": 0}, b',"max_interruptions":0'),
        ({"max_interruptions": 5}, b',"max_interruptions":5'),
    ],
)
def test_each_setting_adds_only_its_own_field(settings: dict[str, object], extra: bytes) -> None:
    assert body(**settings) == b'{"app":"wire-app","function":"body.<locals>.f"' + extra + b"}"


def test_all_settings_together_in_declaration_order(tmp_path: Path) -> None:
    vol = bladekit.Volume.from_name("wire-vol", create_if_missing=True)
    got = body(
        gpu="A100:2",
        gpu_class="reserved",
        best_effort=True,
        max_interruptions=2,
        volumes={"/data": vol},
    )
    assert got == (
        b'{"app":"wire-app","function":"body.<locals>.f","gpu":"A100:2","gpu_class":"reserved",'
        b'"best_effort":true,"max_interruptions":2,"volumes":{"/data":"wire-vol"}}'
    )


@pytest.mark.parametrize("value", ["SPOT", "preemptible", "", None, 1])
def test_gpu_class_is_validated_at_decoration_time(value: object) -> None:
    app = bladekit.app("v")
    with pytest.raises(bladekit.InvalidArgumentError) as info:
        app.function(gpu_class=value)  # type: ignore[arg-type]
    assert repr(value) in str(info.value)
    assert "'spot' or 'reserved'" in str(info.value)
    assert info.value.code == "INVALID_ARGUMENT"
    with pytest.raises(bladekit.InvalidArgumentError):
        app.cls(gpu_class=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("best_effort", 1),
        ("best_effort", "yes"),
        ("max_interruptions", -1),
        ("max_interruptions", True),
        ("max_interruptions", 2.0),
        ("gpu", ""),
        ("gpu", 3),
        ("volumes", {"relative": None}),
        ("volumes", {"/": None}),
        ("volumes", {"/x": "not-a-volume"}),
        ("volumes", ["/x"]),
    ],
)
def test_bad_values_name_the_argument(argument: str, value: object) -> None:
    app = bladekit.app("v")
    with pytest.raises(bladekit.InvalidArgumentError) as info:
        app.function(**{argument: value})  # type: ignore[arg-type]
    assert info.value.details["argument"] == argument


def test_a_volume_mounted_twice_or_overlapping_is_refused() -> None:
    vol = bladekit.Volume.from_name("a", create_if_missing=True)
    other = bladekit.Volume.from_name("b", create_if_missing=True)
    app = bladekit.app("v")
    with pytest.raises(bladekit.InvalidArgumentError, match="mounted twice"):
        app.function(volumes={"/one": vol, "/two": vol})
    with pytest.raises(bladekit.InvalidArgumentError, match="overlap"):
        app.function(volumes={"/one": vol, "/one/sub": other})


def test_map_and_starmap_carry_the_function_settings() -> None:
    app = bladekit.app("m")

    @app.function(best_effort=True, max_interruptions=1)
    def f(x: int) -> int:
        return x

    # map() takes no settings: they come from the decorator and travel in every run's request.
    with pytest.raises(TypeError):
        f.map([1], best_effort=False)  # type: ignore[call-arg]
    assert decode_request(f.request_body()).best_effort is True


@given(
    gpu=st.none() | st.sampled_from(["T4", "A100:8", "RTX-A4500"]),
    gpu_class=st.sampled_from(["spot", "reserved"]),
    best_effort=st.booleans(),
    max_interruptions=st.none() | st.integers(min_value=0, max_value=1000),
)
def test_request_round_trips_and_omits_exactly_the_defaults(
    gpu: str | None, gpu_class: str, best_effort: bool, max_interruptions: int | None
) -> None:
    request = FunctionRequest(
        app="a",
        function="f",
        gpu=gpu,
        gpu_class=gpu_class,
        best_effort=best_effort,
        max_interruptions=max_interruptions,
    )
    data = encode_request(request)
    assert decode_request(data) == request
    assert (b'"best_effort"' in data) == best_effort
    assert (b'"max_interruptions"' in data) == (max_interruptions is not None)
    assert (b'"gpu_class"' in data) == (gpu_class != "spot")


def test_errors_are_portal_core_classes() -> None:
    assert bladekit.RunError is core_errors.RunError
    assert bladekit.PreemptedError is core_errors.PreemptedError
    assert issubclass(bladekit.PreemptedError, bladekit.RunError)
    assert bladekit.PreemptedError.code == "PREEMPTED"
    err = bladekit.PreemptedError(run_id="bk-1", details={"n": 1})
    assert (err.run_id, err.details, err.code) == ("bk-1", {"n": 1}, "PREEMPTED")
    assert bladekit.PreemptedError().details == {}


@pytest.mark.parametrize(
    ("source", "says", "way_out"),
    [
        ("async def fetch(n): return n", "an async def function", "asyncio.run(fetch(...))"),
        ("def count(n):\n    yield n", "a generator function", "list(count(...))"),
        ("async def stream(n):\n    yield n", "an async generator", "asyncio.run("),
    ],
)
def test_async_and_generator_functions_are_refused_when_decorated(
    source: str, says: str, way_out: str
) -> None:
    namespace: dict[str, object] = {}
    exec(source, namespace)
    (fn,) = [v for k, v in namespace.items() if k != "__builtins__"]
    app = bladekit.app("plain-only")
    with pytest.raises(bladekit.InvalidArgumentError) as info:
        app.function()(fn)  # type: ignore[arg-type]
    message = str(info.value)
    assert says in message and "bladekit runs plain functions" in message and way_out in message
    assert app.registered == {}
    with pytest.raises(bladekit.InvalidArgumentError, match=says):
        app.method()(fn)  # type: ignore[arg-type]
