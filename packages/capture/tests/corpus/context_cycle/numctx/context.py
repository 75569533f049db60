"""The context: the working precision, the classes it makes, its constants and caches."""

from numctx import tables




def _make_num(scaled, digits):
    from numctx import ctx  # as mpmath's _make_mpf does

    return ctx.Num._exact(scaled, digits)


def _pi_digits(digits):
    """pi * 10**digits, by Machin's formula on integers."""

    one = 10 ** (digits + 10)

    def arctan_inv(x):
        total = term = one // x
        n, sign = 3, -1
        while term:
            term //= x * x
            total += sign * (term // n)
            n, sign = n + 2, -sign
        return total

    return (4 * (4 * arctan_inv(5) - arctan_inv(239))) // 10**10


class _Num:
    __slots__ = ("_value", "_digits")

    def __new__(cls, value=0):
        ctx = cls.context  # set on the classes the context makes
        self = object.__new__(cls)
        self._value = int(value * 10**ctx.digits)
        self._digits = ctx.digits
        return self

    @classmethod
    def _exact(cls, scaled, digits):
        self = object.__new__(cls)
        self._value, self._digits = scaled, digits
        return self

    def __reduce__(self):
        return _make_num, (self._value, self._digits)

    def scaled(self, digits):
        value = self._value
        return value * 10 ** (digits - self._digits) if digits >= self._digits else value // 10 ** (
            self._digits - digits
        )

    def __hash__(self):
        return tables.mix(self._digits, self._value)

    def __eq__(self, other):
        return isinstance(other, _Num) and (self._value, self._digits) == (
            other._value,
            other._digits,
        )

    def __mul__(self, other):
        digits = self.context.digits
        product = self.scaled(digits) * (other.scaled(digits) if isinstance(other, _Num) else other)
        return self.context.Num._exact(
            product // (10**digits if isinstance(other, _Num) else 1), digits
        )

    def __str__(self):
        text = str(abs(self._value)).rjust(self._digits + 1, "0")
        sign = "-" if self._value < 0 else ""
        return f"{sign}{text[: -self._digits]}.{text[-self._digits :]}"


class _Constant(_Num):
    """A constant: its value is computed at the working precision each time it is read."""

    __slots__ = ("name", "func")

    def __init__(self, name, func):
        self.name, self.func = name, func

    def __new__(cls, name, func):
        return object.__new__(cls)

    @property
    def _value(self):
        return self.func(self.context.digits)

    @property
    def _digits(self):
        return self.context.digits

    def __repr__(self):
        return f"<{self.name}>"


class Context:
    def __init__(self):
        self.digits = 10
        self.Num = type("Num", (_Num,), {})
        self.Num.context = self
        self.Constant = type("Constant", (_Constant,), {})
        self.Constant.context = self
        self.pi = self.Constant("pi", _pi_digits)
        self.one = self.Num._exact(1, 0)
        self.areas = {}  # (pi, digits, r) -> area: keyed by a constant, as mpmath's quad cache

    def area(self, r):
        key = (self.pi, self.digits, r)
        if key not in self.areas:
            self.areas[key] = self.pi * (r * r)
        return self.areas[key]
