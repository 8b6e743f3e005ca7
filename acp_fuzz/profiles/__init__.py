"""The built-in agent profiles: TOML data read by :mod:`acp_fuzz.engine.agents.profiles`
(``acp-fuzz profiles`` lists them). A package only so that the wheel ships the folder."""
