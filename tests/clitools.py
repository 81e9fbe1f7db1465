"""Running the `flatformer` command as a user does, and what a refusal must look like."""

import subprocess
import sys


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "flatformer", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd)


def assert_one_line_error(result, *words):
    """A non-zero exit with one line on stderr, `flatformer: error: ...` naming `words`."""
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("flatformer: error: "), lines[0]
    for word in words:
        assert word in lines[0]
