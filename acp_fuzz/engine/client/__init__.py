"""The client side: acp-fuzz playing an agent to an ACP client (engine).

``campaign`` (``acp-fuzz client``: drawn capability sets, each client step run against the
stand-in and judged), ``stand_in`` (the small reactive agent the client is pointed at; it
loads the core alone) and ``as_agent`` (``acp-fuzz replay --as-agent``: a cassette's agent
side served on stdio). This file imports nothing.
"""
