"""Synthesizer backends: local Kokoro, a remote `voicecli serve`, a SageMaker endpoint.

Each implements ``voicecli.frames.Synthesizer``; ``factory.make_synthesizer`` picks one.
"""
