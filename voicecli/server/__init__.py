"""The SageMaker-compatible speech server (``voicecli serve``) and its wire protocol."""
