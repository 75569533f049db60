"""A small arbitrary-precision-like package in the shape of mpmath: a module-level context
``ctx`` whose number classes are made by the context and hold it, numbers that pickle through
their own ``__reduce__`` (which imports ``ctx`` back), constants computed on demand at the
context's working precision, and caches keyed by constants."""

from numctx.context import Context

ctx = Context()
Num = ctx.Num
