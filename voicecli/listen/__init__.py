"""Voice input: the microphone (``mic``), voice activity (``vad``), the end of the user's
turn (``turns``) and speech recognition (``asr``). No torch: a client of the engine
stays light."""
