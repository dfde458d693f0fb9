"""``python -m gateway``: run the gateway alone, configured from KSWARM_GATEWAY_* variables."""

from __future__ import annotations

import uvloop

from gateway.app import create_app
from gateway.config import GatewaySettings
from gateway.plugins import default_plugins
from gateway.server import serve


def main() -> None:
    settings = GatewaySettings()
    uvloop.run(serve(create_app(settings, plugins=default_plugins()), settings))


if __name__ == "__main__":
    main()
