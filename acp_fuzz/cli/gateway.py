"""``acp-fuzz gateway``: the fake model gateway on its own, to wire an agent by hand."""

from __future__ import annotations

import signal
import time
from typing import Any

import typer

from acp_fuzz.cli.app import app, check_url, fail, out
from acp_fuzz.core.escaping import terminal

__all__ = ["gateway"]


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@app.command()
def gateway(reply: str = typer.Option("ok", "--reply", help="The text every model reply says."),
            upstream: str | None = typer.Option(None, "--upstream", metavar="URL",
                                                help="Forward to a real provider instead."),
            ) -> None:
    """Run the fake model gateway on its own, to wire an agent by hand."""
    from acp_fuzz.core.history import Event, History
    from acp_fuzz.engine.gateway import Gateway

    def sink(ev: Event) -> None:
        if ev.kind == "model":
            d = ev.data
            sys_text = " | ".join(s["text"][:60] for s in d.get("segments", [])
                                  if s.get("slot") == "system")
            out.print(terminal(f"{d.get('method')} {d.get('path')} [{d.get('api')}] "
                               f"system: {sys_text!r}"), markup=False)

    hist = History(sink=sink)
    try:
        gw = Gateway(hist, reply_text=reply, upstream=check_url(upstream)).start()
    except OSError as e:
        fail(f"cannot listen on 127.0.0.1: {e.strerror or e}")
    out.print(f"fake model gateway on {gw.url}  (Ctrl-C stops)", markup=False)
    for k, v in gw.agent_env().items():
        out.print(f"export {k}={v}", markup=False)
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        while True:
            time.sleep(3600)  # the server runs in its own threads; Ctrl-C ends this wait
    except KeyboardInterrupt:
        pass
    finally:
        gw.stop()
