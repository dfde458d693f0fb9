"""``python -m gateway``: run the gateway alone, configured from KSWARM_GATEWAY_* variables."""

from __future__ import annotations

import sys

import uvloop
from pydantic import ValidationError
from pydantic_settings import SettingsError

from gateway.app import create_app
from gateway.config import GatewaySettings
from gateway.errors import PluginError
from gateway.llm.config import LLMProxySettings
from gateway.logs import configure_logging
from gateway.plugins import default_plugins
from gateway.server import serve


def settings_error(what: str, exc: ValidationError) -> str:
    """One line naming each bad variable, instead of pydantic's multi-line report."""
    problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or what}: {e['msg']}" for e in exc.errors())
    return f"gateway: bad {what} settings: {problems}"


def main() -> None:
    configure_logging()  # before any component is built: the MCP SDK would configure rich tracebacks
    try:
        settings = GatewaySettings()
        llm = LLMProxySettings()
    except ValidationError as exc:
        sys.exit(settings_error("KSWARM_GATEWAY_*/KSWARM_LLM_*", exc))
    try:
        app = create_app(settings, plugins=default_plugins(llm))
    except ValidationError as exc:  # a component's own settings (KSWARM_FORGE_*, KSWARM_JOBS_*, ...)
        sys.exit(settings_error("component", exc))
    except (PluginError, SettingsError) as exc:  # plugins that do not fit; a variable that does not parse
        sys.exit(f"gateway: {exc}")
    uvloop.run(serve(app, settings, freeze_heap=True))


if __name__ == "__main__":
    main()
