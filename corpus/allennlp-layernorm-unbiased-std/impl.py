"""A model of AllenNLP's LayerNorm module as it was before PR #953 (allennlp/modules/layer_norm.py
at 26041a7, lines 27-38), written here from reading it: a weight `gamma` (ones) and a bias
`beta` (zeros) over the last axis, eps 1e-6 by default. The forward works in the input's dtype:
the row mean, the row standard deviation by torch's default *unbiased* estimator (divides by n - 1:
the bug PR #953 fixes), and gamma * (x - mean) / (std + eps) + beta, eps added to the standard
deviation rather than to the variance."""
import torch


class LayerNorm(torch.nn.Module):
    def __init__(self, dimension: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.gamma = torch.nn.Parameter(torch.ones(dimension))
        self.beta = torch.nn.Parameter(torch.zeros(dimension))
        self.eps = eps

    def forward(self, tensor):
        mean = tensor.mean(-1, keepdim=True)
        std = tensor.std(-1, keepdim=True)  # unbiased: sum of squares / (n - 1)
        return self.gamma * (tensor - mean) / (std + self.eps) + self.beta
