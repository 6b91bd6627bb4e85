"""A Kubernetes API that serves one thing, the namespaces' metadata, for
deploy/grafana/check: enough for nodens's namespace watch (`[cluster]
namespaces_from_api`) to list, watch, fail and recover, so that the API watch
panels have series that move.

Until trouble() is called, a list answers two namespaces and a watch stays
open. trouble() closes the open watches; the next ones are answered from
SCRIPT: 500s (watch errors: the watch is out of sync for the backoff after
each; each 500 is answered ERROR_DELAY after the request, so the three in a
row keep the watch out of sync for seconds, longer than Prometheus's scrape
interval, whatever backoff nodens draws: the staleness panel sees it), each run of them followed by a watch held open a while then closed
(a resume: it went on from its version without a list; two, so that the
counter, which appears at the first, also rises), one 410 Gone (nodens
lists again), then watches held open until stop().
"""

import http.server
import json
import threading
import time

SCRIPT = ["500", "500", "500", "open 1", "500", "open 2", "410"]
ERROR_DELAY = 1.0  # seconds
VERSION = "100"


def _meta(name):
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": VERSION}}


class FakeApi:
    def __init__(self, address):
        self.script = list(SCRIPT)
        self.troubled = threading.Event()
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.requests = []
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the body ends when the connection does

            def log_message(self, *_args):
                pass

            def reply(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                path, _, query = self.path.partition("?")
                with api.lock:
                    api.requests.append(self.path)
                if path != "/api/v1/namespaces":
                    self.reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                     "reason": "NotFound", "code": 404})
                    return
                if "watch=" not in query:
                    self.reply(200, {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                                     "metadata": {"resourceVersion": VERSION},
                                     "items": [_meta("default"), _meta("kube-system")]})
                    return
                step = "open"
                if api.troubled.is_set():
                    with api.lock:
                        step = api.script.pop(0) if api.script else "open"
                if step in ("500", "410"):
                    code = int(step)
                    if code == 500:
                        time.sleep(ERROR_DELAY)
                    self.reply(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                      "reason": "Expired" if code == 410 else "InternalError",
                                      "message": "too old resource version" if code == 410 else "fake API",
                                      "code": code})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                # A bookmark at once, then nothing until the watch is to end.
                self.wfile.write(json.dumps({"type": "BOOKMARK", "object": {
                    "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                    "metadata": {"resourceVersion": VERSION}}}).encode() + b"\n")
                self.wfile.flush()
                held = float(step.split()[1]) if step.startswith("open ") else None
                began = time.monotonic()
                opened_troubled = api.troubled.is_set()
                while not api.stopped.is_set():
                    if held is not None and time.monotonic() - began >= held:
                        break
                    if not opened_troubled and api.troubled.is_set():
                        break
                    time.sleep(0.1)

        self.server = http.server.ThreadingHTTPServer(address, Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self):
        self.thread.start()

    def trouble(self):
        self.troubled.set()

    def stop(self):
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()

    def kubeconfig(self):
        host, port = self.server.server_address[:2]
        return ("apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
                f"clusters:\n- name: fake\n  cluster: {{server: \"http://{host}:{port}\"}}\n"
                "users:\n- name: fake\n  user: {}\n"
                "contexts:\n- name: fake\n  context: {cluster: fake, user: fake}\n")
