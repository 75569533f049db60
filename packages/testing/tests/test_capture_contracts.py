"""The serializer and capture-extension contracts pass a plugin that does its work and fail,
naming the fault, one that does not: a rebuild function no resumed process can find, a
reducer that makes two objects of one, an extension whose restore forgets."""

from __future__ import annotations

import fractions
from collections.abc import Sequence
from typing import Any

import pytest

from portal.core.specs import CaptureExtensionSpec, SerializerSpec
from portal.testing import CaptureExtensionContract, SerializerContract


def rebuild_fraction(numerator: int, denominator: int) -> fractions.Fraction:
    return fractions.Fraction(numerator, denominator)


def _reduce_fraction(value: fractions.Fraction) -> Any:
    return (rebuild_fraction, (value.numerator, value.denominator))


class TestAGoodSerializer(SerializerContract):
    def make_spec(self) -> SerializerSpec:
        return SerializerSpec(
            name="test_fractions", reducers={"fractions.Fraction": _reduce_fraction}
        )

    def make_values(self) -> Sequence[object]:
        return [fractions.Fraction(3, 7), fractions.Fraction(-1, 2)]


class _ByLambda(TestAGoodSerializer):
    def make_spec(self) -> SerializerSpec:
        return SerializerSpec(
            name="test_lambda",
            reducers={"fractions.Fraction": lambda v: (lambda n, d: n / d, (v.numerator, 1))},
        )


def test_a_rebuild_function_found_by_no_name_fails() -> None:
    contract = _ByLambda()
    spec = contract.make_spec()
    with pytest.raises(AssertionError, match="cannot be found by its name"):
        contract.test_rebuild_functions_are_found_by_name(spec, contract.make_values())


def test_an_unqualified_key_fails() -> None:
    contract = TestAGoodSerializer()
    spec = SerializerSpec(name="test_bare", reducers={"Fraction": _reduce_fraction})
    with pytest.raises(AssertionError, match="not a qualified name"):
        contract.test_keys_are_qualified_names(spec)


_SETTING = {"level": 0}


class TestAGoodExtension(CaptureExtensionContract):
    def make_spec(self) -> CaptureExtensionSpec:
        return CaptureExtensionSpec(
            name="test_level",
            capture=lambda: dict(_SETTING),
            restore=_SETTING.update,
        )

    def change(self) -> None:
        _SETTING["level"] += 5

    def reset(self) -> None:
        _SETTING["level"] = 0

    def observe(self) -> object:
        return dict(_SETTING)


class _Forgetful(TestAGoodExtension):
    def make_spec(self) -> CaptureExtensionSpec:
        return CaptureExtensionSpec(name="test_forgets", capture=lambda: 1, restore=lambda v: None)


def test_an_extension_whose_restore_forgets_fails() -> None:
    contract = _Forgetful()
    spec = contract.make_spec()
    try:
        with pytest.raises(AssertionError):
            contract.test_restore_brings_back_what_capture_saw(spec)
    finally:
        _SETTING["level"] = 0


class _Still(TestAGoodExtension):
    def change(self) -> None:
        pass


def test_a_change_that_changes_nothing_is_named() -> None:
    contract = _Still()
    with pytest.raises(AssertionError, match="change\\(\\) changed nothing"):
        contract.test_restore_brings_back_what_capture_saw(contract.make_spec())
