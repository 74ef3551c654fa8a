"""attnbench: which attention should a long-context model use, and what does it cost?"""

__version__ = "0.1.0"
