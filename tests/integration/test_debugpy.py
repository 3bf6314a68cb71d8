"""dlreplay --debug debugpy: the replay stops at its target and waits for a DAP client (VS Code's
Remote Attach); a minimal client speaking the Debug Adapter Protocol over the printed address
attaches, sees the job paused with the job's own frames on the stack, and detaches; the
replay then runs on to its end."""
import json
import os
import re
import socket
import subprocess
import unittest

from harness import PY, TraceTestCase, run, tool

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "jobs", "tiny_train.py")


class DapClient:
    """Just enough DAP: Content-Length framed JSON requests, responses and events."""

    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port), timeout=60)  # a hang fails, not blocks
        self.buf = b""
        self.seq = 0
        self.backlog = []

    def request(self, command, **arguments):
        self.seq += 1
        body = json.dumps({"seq": self.seq, "type": "request", "command": command, "arguments": arguments}).encode()
        self.sock.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return self.seq

    def _message(self):
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError("the debug adapter closed the connection")
            self.buf += chunk
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        length = next(int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length"))
        while len(self.buf) < length:
            self.buf += self.sock.recv(65536)
        msg, self.buf = self.buf[:length], self.buf[length:]
        return json.loads(msg)

    def _first(self, pred):
        """The first message, received or to come, that pred accepts (others are kept)."""
        for i, m in enumerate(self.backlog):
            if pred(m):
                return self.backlog.pop(i)
        while True:
            m = self._message()
            if pred(m):
                return m
            self.backlog.append(m)

    def response(self, seq):
        return self._first(lambda m: m.get("type") == "response" and m.get("request_seq") == seq)

    def event(self, name):
        return self._first(lambda m: m.get("type") == "event" and m.get("event") == name)

    def close(self):
        self.sock.close()


class DebugpyTest(TraceTestCase):
    def test_dap_client_attaches_at_the_stop(self):
        trace = self.trace_path()
        run([tool("dlrecord"), "-o", trace, "--", PY, TINY, "--steps", "4"], check=True, timeout=300)
        job = subprocess.Popen([tool("dlreplay"), trace, "--until", "step=2", "--debug", "debugpy:0"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            seen = []
            address = None
            for line in job.stderr:
                seen.append(line)
                m = re.search(r"debugpy listening on ([\d.]+):(\d+): attach a DAP client", line)
                if m:
                    address = (m.group(1), int(m.group(2)))
                    break
            self.assertIsNotNone(address, "".join(seen))
            self.assertIn("replay stopped (target)", "".join(seen))
            client = DapClient(*address)  # the port is listening
            init = client.response(client.request("initialize", adapterID="dlrr-test", clientID="dlrr-test",
                                                  pathFormat="path", linesStartAt1=True, columnsStartAt1=True))
            self.assertTrue(init["success"], init)
            attach = client.request("attach", justMyCode=False)
            client.event("initialized")
            self.assertTrue(client.response(client.request("configurationDone"))["success"])
            self.assertTrue(client.response(attach)["success"])
            stopped = client.event("stopped")
            stack = client.response(client.request("stackTrace", threadId=stopped["body"]["threadId"]))
            paths = [f.get("source", {}).get("path", "") for f in stack["body"]["stackFrames"]]
            self.assertIn(TINY, paths)  # the job's own code, paused at the stop
            client.request("disconnect", terminateDebuggee=False)
            client.close()
            out, err = job.communicate(timeout=240)
            self.assertEqual(job.returncode, 0, "".join(seen) + err)
            self.assertIn("debugger attached", err)
        finally:
            if job.poll() is None:
                job.kill()
                job.communicate()

    def test_bad_debugpy_address_is_a_usage_error(self):
        for bad in ("debugpy:", "debugpy:port", "debugpy:70000", "debugpyx"):
            p = run([tool("dlreplay"), self.tmp, "--debug", bad])
            self.assertEqual(p.returncode, 2, bad)
            self.assertIn("--debug must be", p.stderr)


if __name__ == "__main__":
    unittest.main()
