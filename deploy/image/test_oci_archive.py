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


def data(path):
    with open(path, "rb") as f:
        return f.read()


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


class MultiPlatformTest(unittest.TestCase):
    """--platform: one image index, one manifest per platform."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name
        self.roots = {}
        for arch in ("amd64", "arm64"):
            root = os.path.join(self.d, arch)
            os.makedirs(os.path.join(root, "usr", "bin"))
            with open(os.path.join(root, "usr", "bin", "tool"), "wb") as f:
                f.write(b"\x7fELF for " + arch.encode())
            os.chmod(os.path.join(root, "usr", "bin", "tool"), 0o755)
            self.roots[arch] = root

    def tearDown(self):
        self.tmp.cleanup()

    def build(self, out, *platform_args):
        return run("--name", "example.test/multi:2", "--out", out,
                   "--entrypoint", "/usr/bin/tool", "--cmd", "serve", *platform_args)

    def two(self, out, *extra):
        return self.build(out, "--platform", "linux/amd64", "--dir", self.roots["amd64"] + ":/",
                          "--platform", "linux/arm64", "--dir", self.roots["arm64"] + ":/",
                          "--label", "a=b", *extra)

    def read(self, out):
        with tarfile.open(out) as t:
            files = {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}

        def blob(digest):
            data = files["blobs/sha256/" + digest.split(":", 1)[1]]
            self.assertEqual(sha(data), digest)
            return data
        return files, blob

    def test_index_of_manifests(self):
        out = os.path.join(self.d, "m.tar")
        p = self.two(out)
        files, blob = self.read(out)
        top = json.loads(files["index.json"])
        (desc,) = top["manifests"]
        self.assertEqual(desc["mediaType"], "application/vnd.oci.image.index.v1+json")
        self.assertNotIn("platform", desc)
        self.assertEqual(desc["annotations"], {"io.containerd.image.name": "example.test/multi:2",
                                               "org.opencontainers.image.ref.name": "2"})
        self.assertEqual(p.stdout.split()[-1], desc["digest"])
        nested_bytes = blob(desc["digest"])
        self.assertEqual(desc["size"], len(nested_bytes))
        nested = json.loads(nested_bytes)
        self.assertEqual(nested["mediaType"], "application/vnd.oci.image.index.v1+json")
        self.assertEqual([m["platform"] for m in nested["manifests"]],
                         [{"architecture": "amd64", "os": "linux"}, {"architecture": "arm64", "os": "linux"}])
        for m in nested["manifests"]:
            arch = m["platform"]["architecture"]
            mbytes = blob(m["digest"])
            self.assertEqual(m["size"], len(mbytes))
            self.assertEqual(m["mediaType"], "application/vnd.oci.image.manifest.v1+json")
            manifest = json.loads(mbytes)
            config = json.loads(blob(manifest["config"]["digest"]))
            self.assertEqual((config["architecture"], config["os"]), (arch, "linux"))
            self.assertEqual(config["config"]["Entrypoint"], ["/usr/bin/tool"])
            self.assertEqual(config["config"]["Cmd"], ["serve"])
            self.assertEqual(config["config"]["Labels"], {"a": "b"})  # given after a --platform
            (layer,) = manifest["layers"]
            layer_tar = gzip.decompress(blob(layer["digest"]))
            self.assertEqual(config["rootfs"]["diff_ids"], [sha(layer_tar)])
            with tarfile.open(fileobj=io.BytesIO(layer_tar)) as t:
                self.assertEqual(t.extractfile("usr/bin/tool").read(), b"\x7fELF for " + arch.encode())
        # every blob is named by a descriptor: 1 index, 2 manifests, 2 configs, 2 layers
        self.assertEqual(len([n for n in files if n.startswith("blobs/")]), 7)

    def test_deterministic_and_ordered(self):
        x, y, z = (os.path.join(self.d, n) for n in ("x.tar", "y.tar", "z.tar"))
        self.two(x)
        os.utime(os.path.join(self.roots["arm64"], "usr", "bin", "tool"), (5, 5))
        self.two(y)
        self.assertEqual(data(x), data(y))
        self.build(z, "--label", "a=b", "--platform", "linux/arm64", "--dir", self.roots["arm64"] + ":/",
                   "--platform", "linux/amd64", "--dir", self.roots["amd64"] + ":/")
        files, blob = self.read(z)
        nested = json.loads(blob(json.loads(files["index.json"])["manifests"][0]["digest"]))
        self.assertEqual([m["platform"]["architecture"] for m in nested["manifests"]], ["arm64", "amd64"])

    def test_one_platform_is_the_single_image(self):
        a, b = os.path.join(self.d, "a.tar"), os.path.join(self.d, "b.tar")
        self.build(a, "--arch", "arm64", "--dir", self.roots["arm64"] + ":/")
        self.build(b, "--platform", "linux/arm64", "--dir", self.roots["arm64"] + ":/")
        self.assertEqual(data(a), data(b))
        files, _ = self.read(a)
        (desc,) = json.loads(files["index.json"])["manifests"]
        self.assertEqual(desc["platform"], {"architecture": "arm64", "os": "linux"})

    def test_variant_and_shared_layer(self):
        out = os.path.join(self.d, "v.tar")
        self.build(out, "--platform", "linux/arm/v7", "--dir", self.roots["arm64"] + ":/",
                   "--platform", "linux/arm64", "--dir", self.roots["arm64"] + ":/")
        files, blob = self.read(out)
        nested = json.loads(blob(json.loads(files["index.json"])["manifests"][0]["digest"]))
        self.assertEqual(nested["manifests"][0]["platform"],
                         {"architecture": "arm", "os": "linux", "variant": "v7"})
        config = json.loads(blob(json.loads(blob(nested["manifests"][0]["digest"]))["config"]["digest"]))
        self.assertEqual(config["variant"], "v7")
        # the same layer twice is one blob: 1 index, 2 manifests, 2 configs, 1 layer
        self.assertEqual(len([n for n in files if n.startswith("blobs/")]), 6)

    def test_rejects_bad_platforms(self):
        out = os.path.join(self.d, "bad.tar")
        amd, arm = self.roots["amd64"] + ":/", self.roots["arm64"] + ":/"
        for args in (["--platform", "arm64", "--dir", arm],
                     ["--platform", "linux/", "--dir", arm],
                     ["--platform", "linux/arm64", "--dir", arm, "--platform", "linux/arm64", "--dir", amd],
                     ["--dir", amd, "--platform", "linux/arm64", "--dir", arm],
                     ["--arch", "arm64", "--platform", "linux/arm64", "--dir", arm],
                     ["--platform"]):
            p = run("--name", "example.test/x:1", "--out", out, *args, check=False)
            self.assertEqual(p.returncode, 2, args)
            self.assertFalse(os.path.exists(out), args)


if __name__ == "__main__":
    unittest.main()
