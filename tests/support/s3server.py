"""An S3-protocol server on loopback for the tests and the storage benchmark: moto's,
in its own process, with every request it answers written to a log.

    python tests/s3server.py --port 5123 --log requests.tsv

The log has one tab-separated line a request: method, path, query string, whether
it copies an object (the ``x-amz-copy-source`` header, which is all that tells a
CopyObject from a PutObject), its ``Range`` header and its body length.
:func:`operations` names each line's S3 operation.  Requests are logged as they
arrive, so a reader sees every request the server answered before a client's call
returned.
"""

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from urllib.parse import parse_qs


def _serve(port, log_path):
    from moto.moto_server.werkzeug_app import (DomainDispatcherApplication,
                                               MotoRequestHandler, create_backend_app)
    from werkzeug.serving import run_simple

    moto_app = DomainDispatcherApplication(create_backend_app)
    log = open(log_path, "a", buffering=1, encoding="utf-8")

    def logged(environ, start_response):
        log.write("\t".join((environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""),
                             environ.get("QUERY_STRING", ""),
                             "1" if "HTTP_X_AMZ_COPY_SOURCE" in environ else "0",
                             environ.get("HTTP_RANGE", ""),
                             environ.get("HTTP_X_AMZ_DECODED_CONTENT_LENGTH")
                             or environ.get("CONTENT_LENGTH") or "0")) + "\n")
        return moto_app(environ, start_response)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run_simple("127.0.0.1", port, logged, threaded=True, request_handler=MotoRequestHandler)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(log_path, bucket=None):
    """A server on a free loopback port for the block: yields the environment a client
    needs (``AWS_ENDPOINT_URL``, keys, region), with ``bucket`` created if given.
    The server's own output goes to ``log_path + ".out"``."""
    port = free_port()
    with open(log_path + ".out", "wb") as out:
        server = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--port",
                                   str(port), "--log", log_path],
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the S3 server did not start; see {log_path}.out") \
                        from None
                time.sleep(0.1)
        env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
        if bucket:
            import pyarrow.fs as pafs
            pafs.S3FileSystem(endpoint_override=env["AWS_ENDPOINT_URL"],
                              allow_bucket_creation=True).create_dir(bucket)
        yield env
    finally:
        server.terminate()
        server.wait()


def operation(method, path, query, copy):
    """The S3 operation of a request (path style: ``/bucket/key``)."""
    has_key = "/" in path.strip("/")
    args = parse_qs(query, keep_blank_values=True)
    if method == "HEAD":
        return "HeadObject" if has_key else "HeadBucket"
    if method == "GET":
        return "GetObject" if has_key else "ListObjects"
    if method == "PUT":
        if not has_key:
            return "CreateBucket"
        if "partNumber" in args:
            return "UploadPartCopy" if copy else "UploadPart"
        return "CopyObject" if copy else "PutObject"
    if method == "POST":
        if "uploads" in args:
            return "CreateMultipartUpload"
        if "uploadId" in args:
            return "CompleteMultipartUpload"
        if "delete" in args:
            return "DeleteObjects"
    if method == "DELETE":
        if "uploadId" in args:
            return "AbortMultipartUpload"
        return "DeleteObject" if has_key else "DeleteBucket"
    return f"{method} (other)"


def operations(log_path, start=0):
    """``[(operation, path, range, body bytes)]`` of the requests logged from byte
    ``start`` of the log on, and the log's length (the next ``start``)."""
    with open(log_path, encoding="utf-8") as f:
        f.seek(start)
        text = f.read()
        end = f.tell()
    out = []
    for line in text.splitlines():
        method, path, query, copy, byte_range, length = line.split("\t")
        out.append((operation(method, path, query, copy == "1"), path, byte_range,
                    int(length)))
    return out, end


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", required=True)
    options = parser.parse_args()
    _serve(options.port, options.log)
