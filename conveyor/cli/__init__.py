"""The ``conveyor`` command: nouns with verbs (``conveyor topics plan``), in the manner of dagster.

Every option can also come from an environment variable with the CONVEYOR_ prefix (see --help).
A :class:`~conveyor.errors.ConveyorError` reaching the top is printed as a message, never a
traceback, and sets the exit status.
"""

from __future__ import annotations

import os
import sys
from enum import Enum
from typing import Annotated

import typer

from conveyor.cli import acl_cmd, config_cmd, dispatch_cmd, gateway_cmd, ops_cmd, replicate_cmd, runtime_cmd, topics_cmd
from conveyor.cli import lake_cmd
from conveyor.cli import advise_cmd, alerts_cmd, balance_cmd, ops_files_cmd, throttle_cmd
from conveyor.cli import deploy_cmd, verify_cmd, views_cmd
from conveyor.cli.common import err_console
from conveyor.cli.extras import missing_extra
from conveyor.config import ConfigError
from conveyor.errors import ConveyorError
from conveyor.service import setup_logging

app = typer.Typer(
    rich_markup_mode="markdown",
    name="conveyor",
    help="Conveyor: event data on Apache Kafka, from services to the lake. Start with `conveyor up`.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class LogLevel(str, Enum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


class LogFormat(str, Enum):
    text = "text"
    json = "json"


@app.callback()
def _logging(
    log_level: Annotated[LogLevel | None, typer.Option(
        "--log-level", case_sensitive=False,
        help="Log level of every logger (default: Conveyor's INFO, libraries' WARNING).")] = None,
    log_format: Annotated[LogFormat, typer.Option(help="Log lines as text or one JSON object each.")] = LogFormat.text,
) -> None:
    setup_logging(log_level.value if log_level else None, log_format.value)
    # The processes a command starts (replicator workers, background services) log the same way.
    if log_level is not None:
        os.environ["CONVEYOR_LOG_LEVEL"] = log_level.value
    os.environ["CONVEYOR_LOG_FORMAT"] = log_format.value


runtime_cmd.register(app)
app.add_typer(topics_cmd.app, name="topics")
app.add_typer(acl_cmd.app, name="acl")
app.add_typer(config_cmd.app, name="config")
app.add_typer(gateway_cmd.app, name="gateway")
app.add_typer(dispatch_cmd.app, name="dispatch")
gateway_cmd.app.command()(gateway_cmd.generate)
# The top-level name it had stays for a release, hidden.
app.command("generate", hidden=True, help="Deprecated: use `conveyor gateway generate`.")(gateway_cmd.generate)
app.add_typer(replicate_cmd.app, name="replicate")
app.add_typer(ops_cmd.app, name="ops")
ops_cmd.register(app)
ops_cmd.app.command()(throttle_cmd.throttle)
ops_cmd.app.command()(ops_files_cmd.rules)
ops_cmd.app.command()(ops_files_cmd.dashboards)
ops_cmd.app.command()(alerts_cmd.alerts)
ops_cmd.app.command()(alerts_cmd.silence)
app.add_typer(lake_cmd.app, name="lake")
app.add_typer(balance_cmd.app, name="balance")
app.add_typer(advise_cmd.app, name="advise")
app.add_typer(views_cmd.app, name="views")
# The pipelines' old noun, hidden: scripts and service units written for it go on working.
pipeline = typer.Typer(hidden=True, no_args_is_help=True, help="Deprecated: use `conveyor lake` and `conveyor views`.")
pipeline.command("lake", help="Deprecated: use `conveyor lake run`.")(lake_cmd.run)
pipeline.command("audit", help="Deprecated: use `conveyor lake audit`.")(lake_cmd.audit)
pipeline.command("realtime", help="Deprecated: use `conveyor views run`.")(views_cmd.run)
app.add_typer(pipeline, name="pipeline", hidden=True)
app.command("verify")(verify_cmd.verify)
app.add_typer(deploy_cmd.app, name="deploy")


def main() -> None:
    try:
        # Every option can come from CONVEYOR_<COMMAND>_<OPTION> (Click's auto_envvar_prefix) besides
        # the shorter names some options declare (CONVEYOR_PLATFORM, CONVEYOR_TOKEN).
        app(auto_envvar_prefix="CONVEYOR")
    except ConfigError as err:
        where = f"{err.source}: " if err.source else ""
        if len(err.problems) == 1 and not err.problems[0].path:
            # The file as a whole (missing, a directory, not UTF-8, not YAML): one line says it all.
            err_console.print("[bold red]error:[/] ", end="")
            err_console.print(f"{where}{err.problems[0].message}", markup=False, highlight=False, soft_wrap=True)
            sys.exit(err.exit_code)
        err_console.print(f"[bold red]error:[/] {where}platform file is invalid ({len(err.problems)} problem(s))")
        for problem in err.problems:
            err_console.print(f"  {problem}", markup=False, highlight=False)
        sys.exit(err.exit_code)
    except ConveyorError as err:
        err_console.print("[bold red]error:[/] ", end="")
        err_console.print(str(err), markup=False, highlight=False)
        sys.exit(err.exit_code)
    except ModuleNotFoundError as err:
        line = missing_extra(err.name)
        if line is None:
            raise
        err_console.print("[bold red]error:[/] ", end="")
        err_console.print(line, markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
