"""API tokens (docs/security.md): gRPC client interceptors that add
``authorization: Bearer <token>`` metadata to every call, for the sync
and the asyncio client."""

import collections
import os
from typing import Any, Optional

import grpc
import grpc.aio

from .errors import InvalidArgument

#: The environment variable a Client reads its token from when ``token`` is None.
EnvToken = "MEGAFLOW_TOKEN"


def resolve(token: Optional[str]) -> str:
    """The token to send: ``token``, else env MEGAFLOW_TOKEN, else "" (none).

    Raises:
        InvalidArgument: a token with whitespace or over 1 KiB (a pasted
            line with its newline, or not a token).
    """
    t = token if token is not None else os.environ.get(EnvToken, "")
    if len(t) > 1024 or any(c.isspace() for c in t):
        raise InvalidArgument("megaflow: token: want the secret megaflow token create printed (mft_ and 64 hex digits), "
                              "without spaces or newlines")
    return t


def _with_token(details: Any, md: tuple, aio: bool) -> Any:
    metadata = list(details.metadata or []) + [md]
    if aio:
        return grpc.aio.ClientCallDetails(details.method, details.timeout, metadata, details.credentials,
                                          details.wait_for_ready)
    return _CallDetails(details.method, details.timeout, metadata, details.credentials,
                        details.wait_for_ready, details.compression)


class _CallDetails(collections.namedtuple("_CallDetails", ("method", "timeout", "metadata", "credentials",
                                                           "wait_for_ready", "compression")),
                   grpc.ClientCallDetails):
    pass


class Interceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                  grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds the token to every call of a sync channel (grpc.intercept_channel)."""

    def __init__(self, token: str) -> None:
        self._md = ("authorization", "Bearer " + token)

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(_with_token(client_call_details, self._md, False), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(_with_token(client_call_details, self._md, False), request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return continuation(_with_token(client_call_details, self._md, False), request_iterator)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return continuation(_with_token(client_call_details, self._md, False), request_iterator)


class _AioBase:
    def __init__(self, token: str) -> None:
        self._md = ("authorization", "Bearer " + token)


class _AioUnaryUnary(_AioBase, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, client_call_details, request):
        return await continuation(_with_token(client_call_details, self._md, True), request)


class _AioUnaryStream(_AioBase, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation, client_call_details, request):
        return await continuation(_with_token(client_call_details, self._md, True), request)


class _AioStreamUnary(_AioBase, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return await continuation(_with_token(client_call_details, self._md, True), request_iterator)


class _AioStreamStream(_AioBase, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return await continuation(_with_token(client_call_details, self._md, True), request_iterator)


def aio_interceptors(token: str) -> list:
    """The asyncio channel interceptors that add the token; [] without one."""
    if not token:
        return []
    return [_AioUnaryUnary(token), _AioUnaryStream(token), _AioStreamUnary(token), _AioStreamStream(token)]


def tls_credentials(credentials: Optional[grpc.ChannelCredentials], tls_ca: Optional[str], tls_cert: Optional[str],
                    tls_key: Optional[str], options: Any) -> tuple:
    """The channel credentials and options of a Client: ``credentials``, or
    mutual TLS from the three PEM files (all three or none), or None
    (plaintext).

    Raises:
        InvalidArgument: some of the files but not all, both credentials
            and files, or a file that cannot be read.
    """
    opts = list(options)
    tls_files = {"tls_ca": tls_ca, "tls_cert": tls_cert, "tls_key": tls_key}
    if not any(tls_files.values()):
        return credentials, opts
    missing = [k for k, v in tls_files.items() if not v]
    if missing:
        raise InvalidArgument(f"megaflow: TLS needs tls_ca, tls_cert and tls_key together: {', '.join(missing)} missing")
    if credentials is not None:
        raise InvalidArgument("megaflow: give credentials or tls_ca/tls_cert/tls_key, not both")
    pem = {}
    for k, path in tls_files.items():
        try:
            with open(path, "rb") as f:
                pem[k] = f.read(1 << 20)
        except OSError as e:
            raise InvalidArgument(f"megaflow: {k} {path!r}: {e}") from None
    creds = grpc.ssl_channel_credentials(root_certificates=pem["tls_ca"], private_key=pem["tls_key"],
                                         certificate_chain=pem["tls_cert"])
    # The heads' certificates name their role, not their address.
    opts.append(("grpc.ssl_target_name_override", "head.megaflow"))
    return creds, opts
