"""``voicecli web``: a voice chat page served by voicecli, speaking through the same
session and pipeline as the terminal, with a browser tab as the audio sink."""
