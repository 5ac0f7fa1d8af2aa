"""voicecli: speak an LLM's reply while it is still being written."""

__version__ = "0.1.0"
