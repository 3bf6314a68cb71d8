"""Secrets never recorded (issue 27, item 4; docs/reliability.md "Security"): credential files
the job reads keep only their stat, token-shaped values and URL user-info are redacted from the
environment and the command line whatever their names, --redact adds to the defaults, and a grep
of the raw and zstd-decompressed trace finds none of them. dlrecord says what it left out, and
replay serves no credential file (the job gets ENOENT, the report says why)."""
import json
import os
import subprocess

from harness import PY, TraceTestCase, run, tool

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
SECRETS = {
    "netrc": "machine example.com login me password netrc-s3cret-1",
    "aws": "[default]\naws_secret_access_key = aws-s3cret-2\n",
    "hf": "hf_HuggingFaceS3cretToken0123456789",
    "dotenv": "API_KEY=dotenv-s3cret-4\n",
    "pem": "-----BEGIN PRIVATE KEY-----\npem-s3cret-5\n",
}
ENV = {
    "DATABASE_URL": "postgres://user:db-s3cret-6@db.example:5432/app",
    "GITHUB_PAT": "ghp_GitHubS3cretToken0123456789abcdefAB",
    "MLFLOW_TRACKING_URI": "https://me:mlflow-s3cret-7@mlflow.example",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T000/B000/slack-s3cret-8",
    "FOO_SETTING": "foo-s3cret-9",          # redacted by --redact FOO (no '+')
    "MY_TOKEN": "default-pattern-s3cret-10",  # still redacted by the defaults with --redact FOO
}
ARG = "sk-proj-ArgumentS3cret0123456789abc"
LEAKS = ["s3cret-1", "aws-s3cret-2", "HuggingFaceS3cret", "dotenv-s3cret-4", "pem-s3cret-5", "db-s3cret-6",
         "GitHubS3cret", "mlflow-s3cret-7", "slack-s3cret-8", "foo-s3cret-9", "default-pattern-s3cret-10",
         "ArgumentS3cret"]


def decompressed_frames(path):
    """Every zstd frame's contents in a stream file (frames, docs/format.md: 32-byte headers)."""
    with open(path, "rb") as f:
        data = f.read()
    out, off = [], 16
    while off + 32 <= len(data):
        stored = int.from_bytes(data[off + 16:off + 20], "little")
        payload = data[off + 32:off + 32 + stored]
        at = payload.find(ZSTD_MAGIC)
        if at >= 0:
            p = subprocess.run(["zstd", "-d", "-c", "-q"], input=payload[at:], capture_output=True)
            out.append(p.stdout)
        off += 32 + stored
    return out


class SecretsTest(TraceTestCase):

    def setUp(self):
        super().setUp()
        self.home = os.path.join(self.tmp, "home")
        self.work = os.path.join(self.tmp, "work")
        self.paths = {
            "netrc": os.path.join(self.home, ".netrc"),
            "aws": os.path.join(self.home, ".aws", "credentials"),
            "hf": os.path.join(self.home, ".cache", "huggingface", "token"),
            "dotenv": os.path.join(self.work, ".env"),
            "pem": os.path.join(self.work, "server.pem"),
        }
        for k, p in self.paths.items():
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(SECRETS[k])

    def test_no_secret_reaches_the_trace_raw_or_decompressed(self):
        reads = "; ".join("open(%r).read()" % p for p in self.paths.values())
        code = "import torch, sys; %s; print('read', len(sys.argv))" % reads
        env = dict(ENV, HOME=self.home)
        p = run([tool("dlrecord"), "--redact", "FOO", "-o", self.trace_path(), "--", PY, "-c", code, "--token", ARG],
                env=env, cwd=self.work)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("read 3", p.stdout)  # the job itself got its argument and its files
        names = os.listdir(self.trace_path())
        self.assertTrue(names)
        decompressed = 0
        for name in names:
            with open(os.path.join(self.trace_path(), name), "rb") as f:
                raw = f.read()
            frames = decompressed_frames(os.path.join(self.trace_path(), name))
            decompressed += len(frames)
            for leak in LEAKS:
                self.assertNotIn(leak.encode(), raw, (name, leak))
                for body in frames:
                    self.assertNotIn(leak.encode(), body, (name, leak))
        self.assertGreater(decompressed, 0)  # the grep did see decompressed frames
        # dlrecord said what it left out.
        self.assertIn("dlrecord: left out of the trace:", p.stderr)
        self.assertIn("1 command-line argument(s) holding credentials", p.stderr)
        self.assertIn("DATABASE_URL", p.stderr)
        # The files are known by their stat; the replay serves none of them.
        for p in self.paths.values():
            os.unlink(p)
        p = run([tool("dlreplay"), self.trace_path(), "--json", "--", PY, "-c",
                 "import torch, os; print('exists', os.path.exists(%r))" % self.paths["netrc"]],
                env={"HOME": self.home}, cwd=self.work)
        doc = json.loads(p.stdout.rstrip("\n").rsplit("\n", 1)[-1])
        self.assertIn("exists False", p.stdout, p.stderr)
        for path in self.paths.values():
            self.assertIn(path, doc["files"]["credentials_not_served"])
        for leak in LEAKS:
            self.assertNotIn(leak, p.stdout + p.stderr)


if __name__ == "__main__":
    import unittest
    unittest.main()
