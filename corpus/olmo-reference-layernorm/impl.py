"""A model of OLMo's reference LayerNorm at 59a53e3 (allenai/OLMo olmo/model.py, lines 139-226),
written here from reading it. LayerNormBase(config, *, size=None, elementwise_affine=None) reads eps
from config.layer_norm_eps and the width from size or config.d_model; it creates a weight only when
affine (elementwise_affine, or config.layer_norm_with_affine when that is None) and then a bias only
when config.bias_for_layer_norm (or, when None, config.include_bias) says so. LayerNorm(config, size,
low_precision=False, elementwise_affine=None): the default path is one F.layer_norm with those
(possibly absent) parameters and eps; the low-precision path casts to the autocast dtype first (not
taken outside autocast). The config here carries only the fields these classes read, set as OLMo-7B's
config sets them: no affine (the non-parametric LayerNorm of OLMo-1), eps 1e-5."""
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelConfig:
    d_model: int = 4096
    layer_norm_eps: float = 1e-5
    layer_norm_with_affine: bool = False
    include_bias: bool = False
    bias_for_layer_norm: Optional[bool] = None
    init_device: Optional[str] = None


class LayerNormBase(nn.Module):
    def __init__(self, config: ModelConfig, *, size: Optional[int] = None, elementwise_affine: Optional[bool] = True):
        super().__init__()
        self.config = config
        self.eps = config.layer_norm_eps
        self.normalized_shape = (size or config.d_model,)
        affine = elementwise_affine or (elementwise_affine is None and config.layer_norm_with_affine)
        if affine:
            self.weight = nn.Parameter(torch.ones(self.normalized_shape, device=config.init_device))
            use_bias = config.include_bias if config.bias_for_layer_norm is None else config.bias_for_layer_norm
            if use_bias:
                self.bias = nn.Parameter(torch.zeros(self.normalized_shape, device=config.init_device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("bias", None)
            self.register_parameter("weight", None)


class LayerNorm(LayerNormBase):
    def __init__(self, config: ModelConfig, size: Optional[int] = None, low_precision: bool = False,
                 elementwise_affine: Optional[bool] = None):
        super().__init__(config, size=size, elementwise_affine=elementwise_affine)
        self.low_precision = low_precision

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the default (full precision) path: one F.layer_norm, parameters possibly None
        return F.layer_norm(x, self.normalized_shape, weight=self.weight, bias=self.bias, eps=self.eps)
