"""Running the `flatformer` command as a user does, and what a refusal must look like."""

import subprocess
import sys


def cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "flatformer", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
    )


def assert_one_line_error(result, *words):
    """A non-zero exit with one line on stderr, `flatformer: error: ...` naming `words`."""
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("flatformer: error: "), lines[0]
    for word in words:
        assert word in lines[0]


def cli_here(*args):
    """The command run inside this process: the same main() and output as `cli`, without the
    interpreter start, for the many quick refusals. An unexpected exception propagates."""
    import contextlib
    import io

    import numpy as np

    from flatformer.commands.cli import main

    out, err = io.StringIO(), io.StringIO()
    argv = list(map(str, args))
    saved = np.geterr()  # main() quiets NumPy's warnings for the process it runs in
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            np.seterr(**saved)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
