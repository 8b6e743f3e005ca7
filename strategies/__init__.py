"""Hypothesis strategies for ACP ``systemPrompt`` payloads and session lifecycles.

Installed as ``acp_fuzz.strategies``.
"""
