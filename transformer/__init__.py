"""transformer: "Attention Is All You Need" (Vaswani et al. 2017), line by line, on minitensor.

    from transformer import TransformerConfig, Transformer
    config = TransformerConfig.tiny(vocab_size=16)
    model = Transformer(config, np.random.default_rng(0))
    logits = model(src_ids, tgt_in_ids)                    # (B, T, V)

Modules map to the paper: config (Table 3), attention (§3.2), feed_forward (§3.3),
embedding (§3.4), positional (§3.5), layers (§3.1), model (Figure 1), loss (§5.4),
search (§6.1), checkpoint (saving and loading models, §6.1 averaging).
"""
from .config import TransformerConfig
from .loss import LabelSmoothingLoss, LossOutput
from .masks import padding_mask, subsequent_mask
from .model import Transformer
from .search import beam_search, greedy_decode

__all__ = [
    "TransformerConfig", "Transformer", "LabelSmoothingLoss", "LossOutput",
    "padding_mask", "subsequent_mask", "greedy_decode", "beam_search",
]
