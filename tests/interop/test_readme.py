"""The shell examples of README.md and of every docs/*.md run as written, from a copy of the
repository root's view.

Every fenced block of those files is accounted for. Each ```sh block runs in bash (-e, -u,
pipefail) in a directory of its own that holds a link to this checkout's `.venv`, so
`.venv/bin/python` and `.venv/bin/grpcurl` resolve as they do for a reader at the
repository root — unless the line just above it says `<!-- readme-test: not run: REASON
-->` (an external part, or what CI itself runs), which the test requires to give a reason.
The only changes made to a block: the documented ports (50051, 8080, and 8081 for the
probes; 50052 and 8082 for a server a block starts beside `make run`) become free ones,
and after a line that starts a server in the background (`... serve ... &`) the test waits
for its gRPC port, as a reader would wait for its first log line. Blocks that start no
server talk to one this test starts. Blocks of other languages are not shell: Python must
compile, JSON must parse; no other language may appear. A block that starts a server gives
it a data directory of its own, and no block leaves a file in the working directory it ran
in: the examples write into temporary directories, never into the reader's checkout.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import textwrap
import time
import tomllib

import pytest

from tests.process import ROOT, ServerProcess, free_port, shows_traceback

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TEXTS = {path.relative_to(ROOT).as_posix(): path.read_text() for path in DOCS}


def fences(text: str) -> list[tuple[str, str, str]]:
    """(not-run reason or "", language, body) of every fenced block of `text`."""
    return re.findall(
        r"(?:^<!-- readme-test: not run: (.*?) -->\n)?^```(\w*)\n(.*?)^```", text, flags=re.S | re.M
    )


FENCES = {name: fences(text) for name, text in TEXTS.items()}
NOT_RUN = [
    (reason, body)
    for found in FENCES.values()
    for reason, lang, body in found
    if lang == "sh" and reason
]
BLOCKS = [
    (name, body)
    for name, found in FENCES.items()
    for reason, lang, body in found
    if lang == "sh" and not reason
]


def _wait_for(port: int) -> str:
    """Shell that waits until the server started in the background serves: its port takes
    connections and it has said so (the script's stdout is the file `stdout`, see _run); a
    port that is bound is not yet ready (probes answer 503 until then)."""
    return (
        f"for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null "
        "&& grep -q 'A2A service ready' stdout && break; sleep 0.1; done"
    )


def _prepare(block: str, grpc_port: int, http_port: int, probe_port: int) -> str:
    script = (
        block.replace("localhost:50051", f"localhost:{grpc_port}")
        .replace("localhost:8080", f"localhost:{http_port}")
        .replace("localhost:8081", f"localhost:{probe_port}")
        .replace("A2A_PROBE_PORT=8081", f"A2A_PROBE_PORT={probe_port}")
        .replace("localhost:50052", f"localhost:{grpc_port}")
        .replace("localhost:8082", f"localhost:{http_port}")
        .replace("--grpc-port 50052", f"--grpc-port {grpc_port}")
        .replace("--http-port 8082", f"--http-port {http_port}")
    )
    lines = []
    for line in script.splitlines():
        lines.append(line)
        if re.search(r"\bserve\b.*&\s*$", line):
            lines.append(_wait_for(grpc_port))
    return "\n".join(lines) + "\n"


def _run(script: str, cwd, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # Output goes to files: a server left in the background keeps pipes open.
    with open(cwd / "stdout", "w+") as out, open(cwd / "stderr", "w+") as err:
        proc = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=cwd,
            env=env,
            text=True,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=90)
        finally:
            _end_group(proc.pid)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), err.read())


def _end_group(pgid: int) -> None:
    """Servers a block started in the background go with its process group: SIGTERM (they
    drain), then SIGKILL for anything still there after 10 s."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_every_block_is_run_or_says_why_not(name):
    text, found = TEXTS[name], FENCES[name]
    languages = {lang for _, lang, _ in found}
    allowed = {"sh", "python", "json", "yaml", "toml", "text"}
    assert languages <= allowed, languages  # no unmarked shell
    assert text.count("```") == 2 * len(found)  # every fence was found
    for reason, lang, body in found:
        if lang == "sh" and reason:
            assert len(reason.split()) >= 5, f"say why this block is not run:\n{body}"
    for reason, lang, body in found:  # a transcript shows commands: say why it is not run
        if lang == "text" and any(line.startswith("$ ") for line in body.splitlines()):
            assert reason and len(reason.split()) >= 5, f"say why this is not run:\n{body}"
    for _, lang, body in found:
        if lang == "python":
            try:
                compile(body, name, "exec")
            except SyntaxError:  # an agent snippet: the body of `async def run(self, ctx)`
                compile("async def run(ctx):\n" + textwrap.indent(body, "    "), name, "exec")
        elif lang == "json":
            json.loads(body)
        elif lang == "toml":
            tomllib.loads(body)  # a config file example parses


def test_the_docs_have_runnable_examples():
    assert len(BLOCKS) >= 8
    assert any(name == "README.md" for name, _ in BLOCKS)  # the first calls run
    assert NOT_RUN  # and the markers are read


def test_the_blocks_use_the_checkouts_tools():
    for _, block in BLOCKS:
        assert "python -m" not in block.replace(".venv/bin/python -m", ""), block
        assert not re.search(r"(^|[\s|])grpcurl ", block.replace(".venv/bin/grpcurl ", "")), block


def test_a_block_that_starts_a_server_gives_it_its_own_data_dir():
    """So it runs beside `make run`, which holds the lock on ./data."""
    for _, block in BLOCKS:
        for line in block.splitlines():
            if re.search(r"\bserve\b.*&\s*$", line):
                assert "--data-dir" in line, line
                assert "--grpc-port 50052" in line and "--http-port 8082" in line, line


@pytest.mark.parametrize(
    "index",
    range(len(BLOCKS)),
    ids=[f"{name}:{body.splitlines()[0][:40]}" for name, body in BLOCKS],
)
def test_readme_block_runs(index, tmp_path):
    name, block = BLOCKS[index]
    work = tmp_path / "work"
    work.mkdir()
    (work / ".venv").symlink_to(ROOT / ".venv")
    (tmp_path / "tmp").mkdir()  # the block's mktemp files and directories go with tmp_path
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "A2A_DRAIN_GRACE_SECONDS": "0",
        "TMPDIR": str(tmp_path / "tmp"),
    }
    starts_server = re.search(r"\bserve\b.*&\s*$", block, flags=re.M) is not None
    grpc_port, http_port, probe_port = free_port(), free_port(), free_port()
    server = None
    if starts_server:
        env |= {"A2A_GRPC_PORT": str(grpc_port), "A2A_HTTP_PORT": str(http_port)}
    else:
        server = ServerProcess(
            "--http-port",
            str(http_port),
            "--data-dir",
            str(work / "data"),
            "--push-notifications",
            "true",
        ).start()
        grpc_port = server.grpc_port
    try:
        result = _run(_prepare(block, grpc_port, http_port, probe_port), work, env)
    finally:
        if server is not None:
            assert server.stop() == 0
    assert result.returncode == 0, (
        f"block of {name} failed:\n{block}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    assert not shows_traceback(result.stdout + result.stderr)
    if "card verify" in block:
        assert result.stdout.count("verified") >= 2, result.stdout
    if "SendMessage" in block or "message:send" in block:
        assert "TASK_STATE_COMPLETED" in result.stdout, result.stdout
    if "/health/ready" in block:
        assert '{"status":"ready"}' in result.stdout and '"SERVING"' in result.stdout
    if "a2a-call --approve" in block:
        assert " completed" in result.stdout, result.stdout
    if "service.access" in block:
        assert '"method": "ListTasks"' in result.stdout, result.stdout
    left = sorted(p.name for p in work.iterdir())
    expected = {".venv", "stderr", "stdout"} | ({"data"} if server else set())
    assert set(left) == expected, f"the block left files in the checkout: {left}"
