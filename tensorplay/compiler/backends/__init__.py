"""Compile backends: ``cudagraphs`` (capture and replay); ``eager`` is the plain call."""
