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


LOOPBACK = ("127.0.0.1", "::1", "localhost")


def run(args: argparse.Namespace) -> int:
    import sys

    import uvicorn
    from pydantic import ValidationError

    from service.app import create_app
    from service.http_guard import head_deadline_protocol
    from service.settings import Settings, SettingsFileError

    try:
        settings = Settings.from_env()
    except ValidationError as exc:  # one line per bad setting, naming its variable
        for line in setting_errors(exc):
            print(f"error: {line}", file=sys.stderr)
        return 2
    except SettingsFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if settings.api_token is None and args.host not in LOOPBACK:
        print(f"warning: serving on {args.host} without TRAINPLAN_API_TOKEN: anyone who can "
              "reach this port can plan and read plans", file=sys.stderr)
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level=args.log_level,
                proxy_headers=True, timeout_keep_alive=5,
                http=head_deadline_protocol(settings.header_read_timeout_s))
    return 0


def setting_errors(exc) -> list[str]:
    """'TRAINPLAN_<NAME>: <reason>' for each error of a Settings validation."""
    from service.settings import ENV_PREFIX

    out = []
    for err in exc.errors():
        name = ENV_PREFIX + "_".join(str(p) for p in err.get("loc", ()) if p).upper()
        out.append(f"{name}: {err.get('msg', 'invalid')}")
    return out


def _port(text: str) -> int:
    """argparse type: a TCP port number (argparse prints the error and exits 2)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is outside 1-65535")
    return port
