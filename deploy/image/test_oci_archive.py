"""Tests for deploy/image/oci-archive (stdlib unittest; also runs under pytest).

    python3 -m unittest discover -s deploy/image -p 'test_*.py' -v
"""
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import unittest

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "oci-archive")


def run(*args, check=True):
    p = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError("oci-archive failed: %s" % p.stderr)
    return p


def sha(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


class Archive:
    """The parts of an archive, checked against each other on the way in."""

    def __init__(self, path):
        with tarfile.open(path) as t:
            self.members = t.getmembers()
            self.files = {m.name: t.extractfile(m).read() for m in self.members if m.isfile()}
        self.index = json.loads(self.files["index.json"])
        (self.desc,) = self.index["manifests"]
        self.manifest_bytes = self.blob(self.desc["digest"])
        self.manifest = json.loads(self.manifest_bytes)
        self.config = json.loads(self.blob(self.manifest["config"]["digest"]))
        (layer,) = self.manifest["layers"]
        self.layer_desc = layer
        self.layer_blob = self.blob(layer["digest"])
        gz = layer["mediaType"].endswith("+gzip")
        self.layer_tar = gzip.decompress(self.layer_blob) if gz else self.layer_blob
        with tarfile.open(fileobj=io.BytesIO(self.layer_tar)) as t:
            self.layer = t.getmembers()
            self.layer_files = {m.name: t.extractfile(m).read() for m in self.layer if m.isfile()}

    def blob(self, digest):
        data = self.files["blobs/sha256/" + digest.split(":", 1)[1]]
        assert sha(data) == digest, "blob %s does not match its digest" % digest
        return data


class OciArchiveTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name
        self.bin = os.path.join(self.d, "app")
        with open(self.bin, "wb") as f:
            f.write(b"\x7fELF not really" * 100)
        os.chmod(self.bin, 0o700)
        self.tree = os.path.join(self.d, "etc")
        os.makedirs(os.path.join(self.tree, "sub"))
        with open(os.path.join(self.tree, "sub", "b.conf"), "w") as f:
            f.write("b\n")
        with open(os.path.join(self.tree, "a.conf"), "w") as f:
            f.write("a\n")
        os.symlink("a.conf", os.path.join(self.tree, "link.conf"))

    def tearDown(self):
        self.tmp.cleanup()

    def build(self, out, *extra):
        run("--name", "docker.io/library/nodens:0.1.0", "--out", out,
            "--file", self.bin + ":/usr/bin/nodens:0755",
            "--dir", self.tree + ":/etc/nodens",
            "--symlink", "/usr/bin/nodens:/bin/nodens",
            "--entrypoint", "/usr/bin/nodens", "--cmd", "--config", "--cmd", "/etc/nodens/a.conf",
            "--env", "RUST_LOG=info", "--workdir", "/", "--user", "65532:65532", *extra)
        return Archive(out)

    def test_layout_index_manifest_config(self):
        a = self.build(os.path.join(self.d, "x.tar"))
        self.assertEqual(json.loads(a.files["oci-layout"]), {"imageLayoutVersion": "1.0.0"})
        self.assertEqual(a.desc["annotations"], {
            "io.containerd.image.name": "docker.io/library/nodens:0.1.0",
            "org.opencontainers.image.ref.name": "0.1.0"})
        self.assertEqual(a.desc["size"], len(a.manifest_bytes))
        self.assertEqual(a.desc["platform"], {"architecture": "amd64", "os": "linux"})
        self.assertEqual(a.manifest["schemaVersion"], 2)
        self.assertEqual(a.layer_desc["mediaType"], "application/vnd.oci.image.layer.v1.tar+gzip")
        self.assertEqual(a.layer_desc["size"], len(a.layer_blob))
        self.assertEqual(a.config["architecture"], "amd64")
        self.assertEqual(a.config["os"], "linux")
        self.assertEqual(a.config["rootfs"], {"type": "layers", "diff_ids": [sha(a.layer_tar)]})
        c = a.config["config"]
        self.assertEqual(c["Entrypoint"], ["/usr/bin/nodens"])
        self.assertEqual(c["Cmd"], ["--config", "/etc/nodens/a.conf"])
        self.assertEqual(c["WorkingDir"], "/")
        self.assertEqual(c["User"], "65532:65532")
        self.assertIn("RUST_LOG=info", c["Env"])
        self.assertTrue(any(e.startswith("PATH=") for e in c["Env"]))

    def test_layer_contents_and_metadata(self):
        a = self.build(os.path.join(self.d, "x.tar"))
        names = [m.name for m in a.layer]
        self.assertEqual(names, sorted(names))
        for m in a.layer:
            self.assertEqual((m.mtime, m.uid, m.gid, m.uname, m.gname), (0, 0, 0, "", ""), m.name)
        by = {m.name: m for m in a.layer}
        for d in ("usr", "usr/bin", "etc", "etc/nodens", "etc/nodens/sub", "bin"):
            self.assertTrue(by[d].isdir(), d)
        self.assertEqual(by["usr/bin/nodens"].mode, 0o755)
        self.assertEqual(a.layer_files["usr/bin/nodens"], open(self.bin, "rb").read())
        self.assertEqual(a.layer_files["etc/nodens/sub/b.conf"], b"b\n")
        self.assertTrue(by["etc/nodens/link.conf"].issym())
        self.assertEqual(by["etc/nodens/link.conf"].linkname, "a.conf")
        self.assertEqual(by["bin/nodens"].linkname, "/usr/bin/nodens")

    def test_deterministic(self):
        x = os.path.join(self.d, "x.tar")
        y = os.path.join(self.d, "y.tar")
        self.build(x)
        os.utime(self.bin, (1, 1))
        os.utime(os.path.join(self.tree, "a.conf"), (2, 2))
        self.build(y)
        self.assertEqual(open(x, "rb").read(), open(y, "rb").read())

    def test_uncompressed_and_default_tag(self):
        out = os.path.join(self.d, "u.tar")
        run("--name", "example.test/plain", "--out", out, "--file", self.bin + ":/app", "--uncompressed")
        a = Archive(out)
        self.assertEqual(a.layer_desc["mediaType"], "application/vnd.oci.image.layer.v1.tar")
        self.assertEqual(a.desc["annotations"]["io.containerd.image.name"], "example.test/plain:latest")
        self.assertEqual(a.desc["annotations"]["org.opencontainers.image.ref.name"], "latest")
        self.assertEqual(a.layer_files["app"], open(self.bin, "rb").read())
        self.assertEqual([m.mode for m in a.layer if m.name == "app"], [0o700])

    def test_dir_at_root_and_symlinked_dir(self):
        out = os.path.join(self.d, "r.tar")
        os.symlink("etc", os.path.join(self.d, "etc-link"))
        run("--name", "example.test/r:1", "--out", out, "--dir", self.tree + ":/",
            "--dir", os.path.join(self.d, "etc-link") + ":/lib")
        a = Archive(out)
        by = {m.name: m for m in a.layer}
        self.assertEqual(sorted(by), ["a.conf", "lib", "link.conf", "sub", "sub/b.conf"])
        self.assertTrue(by["lib"].issym())
        self.assertEqual(by["lib"].linkname, "etc")

    def test_rejects_bad_input(self):
        out = os.path.join(self.d, "bad.tar")
        for args in (["--file", self.bin + ":relative/path"],
                     ["--file", self.bin + ":/a/../b"],
                     ["--file", self.bin + ":/x", "--symlink", "y:/x"],
                     ["--file", self.bin + ":/x:99z"],
                     ["--env", "NOEQUALS"]):
            p = run("--name", "example.test/x:1", "--out", out, *args, check=False)
            self.assertEqual(p.returncode, 2, args)
            self.assertFalse(os.path.exists(out), args)


if __name__ == "__main__":
    unittest.main()
