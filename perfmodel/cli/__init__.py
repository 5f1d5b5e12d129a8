"""The command line: argument parsing and printing only. Heavy imports happen inside each command.

One module per command family; each has ``register(subparsers)``, which adds its commands and sets each
parser's ``func``. :data:`FAMILIES` lists them in the order ``perfmodel --help`` shows them. The shared
scenario flags, the scenario built from them and the way output is written live in :mod:`.common`.
"""
from __future__ import annotations

import sys

from ..errors import InputError
from . import calibrate, catalog, deploy, outputs, project, serve, trace, train, tune, validate
from .common import EXIT_INPUT, Parser, check_output_folders, check_outputs_not_inputs

FAMILIES = (project, catalog, validate, calibrate, outputs, train, serve, deploy, tune, trace)

__all__ = ["build_parser", "main", "run"]


def build_parser() -> Parser:
    from .. import __version__

    ap = Parser(prog="perfmodel", description="Project LLM inference on any GPU spec.")
    ap.add_argument("--version", action="version", version=f"perfmodel {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    for family in FAMILIES:
        family.register(sub)
    return ap


def run() -> int:
    """``perfmodel`` as a program (the console script, ``python -m perfmodel``): :func:`main`, then the process's
    objects left out of the garbage collections that Python runs as it exits (``gc.freeze``): they would walk every
    object only for the process to end, 20-30 ms of a cold ``perfmodel project``. Outputs are written and closed
    by then, and the work registered to run at exit (:func:`perfmodel.disk_cache.flush`) still runs. In-process
    callers (tests, notebooks) call :func:`main`, which leaves the collector alone."""
    import gc

    code = main()
    gc.freeze()
    return code


def main(argv: list[str] | None = None) -> int:
    import warnings

    # overflow in the cost formulas is caught where it matters (nothing non-finite leaves the tool, one line
    # says why); numpy's own multi-line warnings would only bury that line
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"perfmodel\.")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_outputs_not_inputs(args)
        check_output_folders(args)
        return args.func(args)
    except InputError as e:
        print(f"perfmodel: error: {e}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("perfmodel: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:
        # the readers turn their own OS errors into InputErrors (perfmodel.io.read_input_bytes); this catches
        # one that a reader outside them met on a path the user gave (a name component over 255 bytes,
        # ENAMETOOLONG, in Path.is_file), so that it is still one line naming the file and exit 2
        if e.filename is None:
            raise
        from ..safeyaml import printable

        print(f"perfmodel: error: {printable(str(e.filename), 120)}: cannot read or write "
              f"({e.strerror or e})", file=sys.stderr)
        return EXIT_INPUT
