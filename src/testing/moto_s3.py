"""The S3 tests' emulated S3 server: moto's, from the project's virtual
environment (scripts/install-deps.sh installs moto[server] there from the
pinned requirements.txt).

    python moto_s3.py PORT BUCKET

Serves S3 on 127.0.0.1:PORT with BUCKET made and empty, until killed; prints
"ready" on standard output once it answers. Started and stopped by
testing/moto_s3.cc (the tests and the S3 benchmark), never by hand.

What this adds in front of moto, and why:
- A request that changes objects (PUT, POST, DELETE) is read whole before
  moto sees it, and one such request runs at a time. S3 applies a PUT whole
  or not at all and refuses a second `If-None-Match: *` create of a key
  atomically; moto checks and then stores, from many threads, so two racing
  creates could both win. ckpt's commit relies on exactly that refusal.
- A body shorter than its Content-Length (a client killed mid-PUT) is
  answered 400 and never stored: a crash test's torn PUT must leave no
  short object under the key, as on S3.
- Reads (GET, HEAD) run concurrently, as on S3.
"""

import io
import logging
import sys
import threading

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server
from werkzeug.test import Client

_CHANGES = {"PUT", "POST", "DELETE"}


class AtomicWrites:
    """WSGI middleware: whole bodies, one change at a time (see above)."""

    def __init__(self, app):
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ, start_response):
        if environ.get("REQUEST_METHOD") not in _CHANGES:
            return self._app(environ, start_response)
        stream = environ["wsgi.input"]
        length = environ.get("CONTENT_LENGTH") or ""
        if length:
            want = int(length)
            body = bytearray()
            while len(body) < want:
                piece = stream.read(min(want - len(body), 1 << 20))
                if not piece:
                    break
                body += piece
            if len(body) != want:
                start_response("400 Bad Request",
                               [("Content-Type", "text/plain")])
                return [b"IncompleteBody"]
        else:
            body = stream.read() if environ.get("wsgi.input_terminated") else b""
        environ["wsgi.input"] = io.BytesIO(bytes(body))
        environ["CONTENT_LENGTH"] = str(len(body))
        with self._lock:
            # Consumed under the lock: moto may answer lazily.
            return list(self._app(environ, start_response))


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: moto_s3.py PORT BUCKET")
    port, bucket = int(sys.argv[1]), sys.argv[2]
    # One line per request would grow the log by the thousands.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app = AtomicWrites(DomainDispatcherApplication(create_backend_app))
    made = Client(app).put("/" + bucket, headers={"Host": f"127.0.0.1:{port}"})
    if made.status_code != 200:
        sys.exit(f"moto_s3: could not make bucket {bucket}: {made.status}")
    server = make_server("127.0.0.1", port, app, threaded=True,
                         request_handler=MotoRequestHandler)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
