"""`trainplan serve [--host H] [--port P]`: the HTTP service (settings from TRAINPLAN_*)."""
from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve", help="run the HTTP service",
        description="Run the HTTP service. Settings come from TRAINPLAN_* environment "
                    "variables (see service/settings.py); OpenAPI docs at /docs.")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=8000, help="TCP port 1-65535 (default 8000)")
    parser.add_argument("--log-level", default="info",
                        choices=("critical", "error", "warning", "info", "debug"))
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from service.app import create_app

    uvicorn.run(create_app(), host=args.host, port=args.port, log_level=args.log_level,
                proxy_headers=True)
    return 0


def _port(text: str) -> int:
    """argparse type: a TCP port number (argparse prints the error and exits 2)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is outside 1-65535")
    return port
