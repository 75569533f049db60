"""A tiny training framework in the shape of Hugging Face's Trainer and accelerate: the training
loop is the library's, the script only configures it and gets callbacks. Pure Python, so the
capture tests run it on every interpreter; installed (a dist-info beside it) as a library."""

from minifw.accel import Accelerator, GradientState, PartialState
from minifw.trainer import Callback, Trainer

__all__ = ["Accelerator", "Callback", "GradientState", "PartialState", "Trainer"]
