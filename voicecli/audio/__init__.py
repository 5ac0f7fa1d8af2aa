"""Audio at the pipeline's edge: ring buffer, device player, WAV writer."""
