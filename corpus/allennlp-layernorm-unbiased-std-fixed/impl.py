"""AllenNLP's LayerNorm module as PR #953 (commit c84c714) leaves it (allennlp/modules/layer_norm.py,
lines 27-38), modelled: the same module with the row standard deviation taken by the biased
estimator (divides by n); the rest unchanged: input-dtype arithmetic throughout and eps added to the
standard deviation, gamma * (x - mean) / (std + eps) + beta."""
import torch


class LayerNorm(torch.nn.Module):
    def __init__(self, dimension: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.gamma = torch.nn.Parameter(torch.ones(dimension))
        self.beta = torch.nn.Parameter(torch.zeros(dimension))
        self.eps = eps

    def forward(self, tensor):
        mean = tensor.mean(-1, keepdim=True)
        std = tensor.std(-1, unbiased=False, keepdim=True)  # biased: divides by n
        return self.gamma * (tensor - mean) / (std + self.eps) + self.beta
