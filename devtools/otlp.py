"""A local OTLP/HTTP trace receiver, as a collector is: ``POST /v1/traces`` with an
``ExportTraceServiceRequest`` in protobuf (gzip or not), decoded with opentelemetry-proto; the spans
it received, flattened for assertions."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str  # '' for a root
    name: str
    kind: str  # SERVER, CLIENT, CONSUMER, INTERNAL, PRODUCER
    attributes: dict
    links: tuple[tuple[str, str, dict], ...]  # (trace_id, span_id, attributes)
    status: str  # UNSET, OK, ERROR
    service: str
    start_ns: int
    end_ns: int


def _value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def _attributes(pairs) -> dict:
    return {pair.key: _value(pair.value) for pair in pairs}


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802 (the standard library's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.take(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def endpoint(self) -> str:
        """``OTEL_EXPORTER_OTLP_ENDPOINT``: the exporter appends ``/v1/traces``."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def take(self, request: ExportTraceServiceRequest) -> None:
        received = []
        for resource_spans in request.resource_spans:
            service = _attributes(resource_spans.resource.attributes).get("service.name", "")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            name=span.name,
                            kind=ProtoSpan.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_"),
                            attributes=_attributes(span.attributes),
                            links=tuple(
                                (link.trace_id.hex(), link.span_id.hex(), _attributes(link.attributes))
                                for link in span.links
                            ),
                            status={0: "UNSET", 1: "OK", 2: "ERROR"}[span.status.code],
                            service=service,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                        )
                    )
        with self.lock:
            self.requests += 1
            self.spans.extend(received)

    def received(self) -> list[ReceivedSpan]:
        with self.lock:
            return list(self.spans)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
