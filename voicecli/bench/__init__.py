"""Benchmarks: streaming against buffered (ab), many conversations against one
server (load), windowed against whole-sentence audio (quality), and the scripted
LLM server that they and the tests replay replies from."""
