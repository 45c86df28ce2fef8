"""Neural-network building blocks on minitensor: Module, layers, initialisers."""
from . import init
from .layers import Dropout, Embedding, LayerNorm, Linear, ModuleList, ReLU, Sequential
from .module import Module, Parameter

__all__ = ["init", "Module", "Parameter", "Linear", "Embedding", "LayerNorm", "Dropout",
           "ModuleList", "Sequential", "ReLU"]
