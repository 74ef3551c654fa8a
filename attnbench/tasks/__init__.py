"""Long-context tasks: generators (needle in a haystack, multi-hop), training batches, scoring."""

from .vocab import Vocab

__all__ = ["Vocab"]
