"""test_grpc.py -- sluice-rls against clients no one here wrote.

python3-grpcio calls ShouldRateLimit and grpc.health.v1.Health/Check with
message classes that protoc compiles, at test time, from the server's own
trimmed protos (server/rls/proto); nghttp (nghttp2-client) sends what a
gRPC client would not: wrong content-type, truncated frames.  Each server
is started by the test on 127.0.0.1 with GRPC_PORT=0 (it prints the port)
and stopped with SIGTERM, which must end it with status 0.

    python3 tests/rls/test_grpc.py BUILD/sluice-rls PROTO_DIR

Exit 77 when grpcio, protobuf or protoc cannot be had.  Every wait is
bounded; limits use day and year windows (CLOCK_REALTIME), and a test that
sees its window change under it (duration_until_reset grows) says so.
"""
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

RLS = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
HEALTH = "/grpc.health.v1.Health/Check"

if len(sys.argv) == 6 and sys.argv[1] == "--hammer":
    # One client process of test_exact_from_four_processes (a process of its
    # own: grpc does not survive fork): n calls on descriptor (shared,
    # value); prints the OK answers, the first and last
    # duration_until_reset, and the OK answers that came after an
    # OVER_LIMIT (a limit that never refills: a refusal it should not
    # have made).
    _, _, _port, _value, _n, _gen = sys.argv
    sys.path.insert(0, _gen)
    import grpc
    from envoy.service.ratelimit.v3 import rls_pb2
    from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
    _ch = grpc.insecure_channel("127.0.0.1:" + _port)
    _call = _ch.unary_unary(RLS, request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
                            response_deserializer=rls_pb2.RateLimitResponse.FromString)
    _req = rls_pb2.RateLimitRequest(domain="test", descriptors=[ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key="shared", value=_value)])])
    _ok, _resets, _over, _late = 0, [], False, 0
    for _ in range(int(_n)):
        _r = _call(_req, timeout=30)
        _good = _r.overall_code == rls_pb2.RateLimitResponse.OK
        _ok += _good
        _late += _good and _over
        _over = _over or not _good
        _resets.append(_r.statuses[0].duration_until_reset.ToNanoseconds())
    _ch.close()
    print(_ok, _resets[0], _resets[-1], _late)
    sys.exit(0)

if len(sys.argv) < 3:
    print("usage: test_grpc.py SLUICE_RLS PROTO_DIR", file=sys.stderr)
    sys.exit(2)
BIN = os.path.abspath(sys.argv[1])
PROTO = os.path.abspath(sys.argv[2])
del sys.argv[1:3]

try:
    import grpc  # noqa: E402
except ImportError:
    print("python3-grpcio is not installed: skipped")
    sys.exit(77)
if not shutil.which("protoc"):
    print("protoc (protobuf-compiler) is not installed: skipped")
    sys.exit(77)

GEN = tempfile.mkdtemp(prefix="rls-py-")
_protos = [os.path.relpath(os.path.join(d, f), PROTO)
           for d, _, fs in os.walk(PROTO) for f in fs if f.endswith(".proto")]
subprocess.run(["protoc", "-I" + PROTO, "--python_out=" + GEN] + _protos, check=True)
sys.path.insert(0, GEN)
from envoy.service.ratelimit.v3 import rls_pb2  # noqa: E402
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2  # noqa: E402

# grpc/health/v1 would shadow the grpc package: load that module by its path.
_spec = importlib.util.spec_from_file_location(
    "health_pb2", os.path.join(GEN, "grpc", "health", "v1", "health_pb2.py"))
health_pb2 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(health_pb2)

OK = rls_pb2.RateLimitResponse.OK
OVER = rls_pb2.RateLimitResponse.OVER_LIMIT

CONFIG = """
domain: test
descriptors:
  - key: two
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: five
    rate_limit: {unit: day, requests_per_unit: 5, name: five-a-day}
  - key: detail
    detailed_metric: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: zero
    rate_limit: {unit: day, requests_per_unit: 0}
  - key: wild
    value: "foo*"
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: minute
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: shared
    rate_limit: {unit: year, requests_per_unit: 500}
  - key: nest
    value: a
    descriptors:
      - key: leaf
        rate_limit: {unit: day, requests_per_unit: 1}
"""


class Server:
    """sluice-rls on 127.0.0.1, a free port, RUNTIME_ROOT in a temp dir."""

    def __init__(self, config=CONFIG, **env):
        self.root = tempfile.mkdtemp(prefix="rls-rt-")
        os.makedirs(os.path.join(self.root, "ratelimit", "config"))
        with open(os.path.join(self.root, "ratelimit", "config", "c.yaml"), "w") as f:
            f.write(config)
        e = dict(os.environ, RUNTIME_ROOT=self.root, RUNTIME_SUBDIRECTORY="ratelimit",
                 GRPC_HOST="127.0.0.1", GRPC_PORT="0", HOST="127.0.0.1", PORT="0", SLUICE_RLS_WORKERS="2")
        e.update({k: str(v) for k, v in env.items()})
        self.errpath = os.path.join(self.root, "stderr")
        self.err = open(self.errpath, "w")
        self.proc = subprocess.Popen([BIN], env=e, stdout=subprocess.PIPE, stderr=self.err, text=True)
        line = self.proc.stdout.readline()  # bounded: the server prints it or exits
        if "listening on" not in line:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("sluice-rls did not start: %r %s" % (line, self.stderr()))
        self.port = int(line.split("listening on ")[1].split()[0].rsplit(":", 1)[1])
        self.http_port = int(line.split(", http ")[1])
        self.channel = grpc.insecure_channel("127.0.0.1:%d" % self.port)
        self.call = self.channel.unary_unary(
            RLS, request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
            response_deserializer=rls_pb2.RateLimitResponse.FromString)
        self.health = self.channel.unary_unary(
            HEALTH, request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString)

    def stderr(self):
        with open(self.errpath) as f:
            return f.read()

    def write_config(self, text):
        """Replace the config file at once (rename), as a deployment would."""
        d = os.path.join(self.root, "ratelimit", "config")
        with open(os.path.join(d, ".c.yaml.new"), "w") as f:
            f.write(text)
        os.replace(os.path.join(d, ".c.yaml.new"), os.path.join(d, "c.yaml"))

    def wait_stderr(self, text, count=1, limit_s=30):
        """Wait (bounded) until `text` appears `count` times on stderr."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit_s:
            if self.stderr().count(text) >= count:
                return
            time.sleep(0.02)
        raise AssertionError("no %r x%d on stderr after %d s: %s" % (text, count, limit_s, self.stderr()))

    def stop(self):
        """SIGTERM; the server must drain and exit 0 within 20 s."""
        self.channel.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = "hung"
        self.proc.stdout.close()
        self.err.close()
        shutil.rmtree(self.root, ignore_errors=True)
        return rc


def desc(*kv, hits=None, limit=None):
    d = ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v) for k, v in kv])
    if hits is not None:
        d.hits_addend.value = hits
    if limit is not None:
        d.limit.requests_per_unit, d.limit.unit = limit
    return d


def request(*descs, domain="test", hits=0):
    return rls_pb2.RateLimitRequest(domain=domain, descriptors=list(descs), hits_addend=hits)


def nghttp(port, path, data, content_type="application/grpc", extra=()):
    """Send one request with nghttp; returns its verbose output."""
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(data)
    try:
        r = subprocess.run(["nghttp", "-v", "-t", "10", "-H", "content-type: " + content_type,
                            "-H", "te: trailers"] + [a for h in extra for a in ("-H", h)] +
                           ["-d", f.name, "http://127.0.0.1:%d%s" % (port, path)],
                           capture_output=True, text=True, errors="replace", timeout=30)
    finally:
        os.unlink(f.name)
    return r.stdout + r.stderr


def pb_varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def pb_bytes(field, data):
    return pb_varint(field << 3 | 2) + pb_varint(len(data)) + data


def raw_request(domain, descriptors, hits=0):
    """A RateLimitRequest encoded by hand, so that its strings may hold any
    bytes (python's protobuf refuses invalid UTF-8): descriptors is a list
    of lists of (key, value) byte strings."""
    out = pb_bytes(1, domain)
    for d in descriptors:
        out += pb_bytes(2, b"".join(pb_bytes(1, pb_bytes(1, k) + pb_bytes(2, v)) for k, v in d))
    if hits:
        out += pb_varint(3 << 3) + pb_varint(hits)
    return out


def frame(msg: bytes) -> bytes:
    return b"\0" + len(msg).to_bytes(4, "big") + msg


class RlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server(SLUICE_RLS_MAX_MSG_BYTES=4096)

    @classmethod
    def tearDownClass(cls):
        rc = cls.s.stop()
        assert rc == 0, "sluice-rls exited with %r after SIGTERM" % rc

    def test_one_limit_counts_exactly(self):
        got = [self.s.call(request(desc(("two", "a"))), timeout=10) for _ in range(4)]
        self.assertEqual([r.overall_code for r in got], [OK, OK, OVER, OVER])
        self.assertEqual([r.statuses[0].limit_remaining for r in got], [1, 0, 0, 0])
        st = got[0].statuses[0]
        self.assertEqual(st.current_limit.requests_per_unit, 2)
        self.assertEqual(st.current_limit.unit, rls_pb2.RateLimitResponse.RateLimit.DAY)
        # Another value of the same key is another counter.
        self.assertEqual(self.s.call(request(desc(("two", "b"))), timeout=10).overall_code, OK)

    def test_all_or_nothing(self):
        """A request refused by one limit charges no other (envoyproxy/ratelimit#1060)."""
        both = request(desc(("two", "aon")), desc(("five", "aon")))
        codes = [self.s.call(both, timeout=10).overall_code for _ in range(4)]
        self.assertEqual(codes, [OK, OK, OVER, OVER])
        r = self.s.call(both, timeout=10)
        self.assertEqual([s.code for s in r.statuses], [OVER, OK])
        self.assertEqual(r.statuses[1].limit_remaining, 3)  # 5 - 2 admitted, refusals not charged
        self.assertEqual(r.statuses[1].current_limit.name, "five-a-day")
        alone = [self.s.call(request(desc(("five", "aon"))), timeout=10).overall_code for _ in range(4)]
        self.assertEqual(alone, [OK, OK, OK, OVER])

    def test_hits_addend(self):
        r = self.s.call(request(desc(("five", "hits")), hits=3), timeout=10)
        self.assertEqual((r.overall_code, r.statuses[0].limit_remaining), (OK, 2))
        r = self.s.call(request(desc(("five", "hits")), hits=3), timeout=10)
        self.assertEqual((r.overall_code, r.statuses[0].limit_remaining), (OVER, 0))
        # Per descriptor 0: check only, charges nothing, even when the request says 3.
        for _ in range(3):
            r = self.s.call(request(desc(("five", "hits"), hits=0), hits=3), timeout=10)
            self.assertEqual((r.overall_code, r.statuses[0].limit_remaining), (OK, 2))
        r = self.s.call(request(desc(("five", "hits"), hits=2)), timeout=10)
        self.assertEqual((r.overall_code, r.statuses[0].limit_remaining), (OK, 0))
        # Enforced descriptors with their own hits: each limit charged its
        # own, all or nothing (five: 5 a day, two: 2 a day).
        def both(h5, h2):
            r = self.s.call(request(desc(("five", "h1"), hits=h5), desc(("two", "h1"), hits=h2)), timeout=10)
            return r.overall_code, [(x.code, x.limit_remaining) for x in r.statuses]
        self.assertEqual(both(3, 1), (OK, [(OK, 2), (OK, 1)]))
        self.assertEqual(both(3, 1), (OVER, [(OVER, 0), (OK, 1)]))  # two would allow: not charged
        self.assertEqual(both(1, 2), (OVER, [(OK, 2), (OVER, 0)]))  # five would allow: not charged
        self.assertEqual(both(2, 1), (OK, [(OK, 0), (OK, 0)]))
        self.assertEqual(both(0, 1), (OVER, [(OK, 0), (OVER, 0)]))  # five probed
        # One key reached twice with different hits: charged once, the larger.
        r = self.s.call(request(desc(("five", "dup"), hits=2), desc(("five", "dup"), hits=4)), timeout=10)
        self.assertEqual([(x.code, x.limit_remaining) for x in r.statuses], [(OK, 1), (OK, 1)])

    def test_shadow_unlimited_zero_nomatch(self):
        for _ in range(3):
            r = self.s.call(request(desc(("shadow", "x"))), timeout=10)
            self.assertEqual(r.overall_code, OK)
        r = self.s.call(request(desc(("free", "x")), desc(("nothing", "x"))), timeout=10)
        self.assertEqual(r.overall_code, OK)
        self.assertEqual(r.statuses[0].limit_remaining, 2**32 - 1)
        self.assertFalse(r.statuses[0].HasField("current_limit"))
        self.assertFalse(r.statuses[1].HasField("current_limit"))
        r = self.s.call(request(desc(("zero", "x")), desc(("five", "zero"))), timeout=10)
        self.assertEqual([s.code for s in r.statuses], [OVER, OK])
        self.assertEqual(r.overall_code, OVER)
        self.assertEqual(r.statuses[1].limit_remaining, 5)  # not charged
        r = self.s.call(request(desc(("two", "x")), domain="no-such-domain"), timeout=10)
        self.assertEqual(r.overall_code, OK)

    def test_limit_override(self):
        """Envoy's per-descriptor limit override replaces the config's limit."""
        day = ratelimit_pb2.DAY
        over = desc(("five", "ovr"), limit=(1, day))
        r = self.s.call(request(over), timeout=10)
        self.assertEqual((r.overall_code, r.statuses[0].limit_remaining), (OK, 0))
        self.assertEqual(r.statuses[0].current_limit.requests_per_unit, 1)
        self.assertEqual(self.s.call(request(over), timeout=10).overall_code, OVER)
        # The config's own limit of that descriptor was not charged.
        r = self.s.call(request(desc(("five", "ovr"))), timeout=10)
        self.assertEqual((r.overall_code, r.statuses[0].limit_remaining), (OK, 4))
        # An override on a key the config does not know, and with another
        # domain: none is limited there.
        self.assertEqual(self.s.call(request(desc(("nothing", "o"), limit=(1, day))), timeout=10).overall_code, OK)
        self.assertEqual(self.s.call(request(desc(("nothing", "o"), limit=(1, day))), timeout=10).overall_code, OVER)
        r = self.s.call(request(desc(("nothing", "o"), limit=(1, day)), domain="elsewhere"), timeout=10)
        self.assertEqual(r.overall_code, OK)
        with self.assertRaises(grpc.RpcError) as e:
            self.s.call(request(desc(("nothing", "o"), limit=(1, 0))), timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("limit override with unit 0", e.exception.details())

    def test_headers_draft(self):
        """response_headers_to_add: the draft's RateLimit fields, one item
        per limited descriptor, Retry-After on a refusal."""
        def heads(r):
            return {h.key: h.value for h in r.response_headers_to_add}
        two = request(desc(("two", "hdr")), desc(("five", "hdr")))
        h = heads(self.s.call(two, timeout=10))
        self.assertEqual(h["RateLimit-Policy"], '"test.two";q=2;w=86400, "five-a-day";q=5;w=86400')
        reset = int(h["RateLimit"].split(";t=")[1].split(",")[0])
        self.assertTrue(0 < reset <= 86400, h)
        self.assertEqual(h["RateLimit"], '"test.two";r=1;t=%d, "five-a-day";r=4;t=%d' % (reset, reset))
        self.assertNotIn("Retry-After", h)
        self.s.call(two, timeout=10)
        r = self.s.call(two, timeout=10)
        self.assertEqual(r.overall_code, OVER)
        h = heads(r)
        self.assertEqual(h["RateLimit"].split(", ")[0].split(";")[1], "r=0")
        self.assertIn(int(h["Retry-After"]), (reset, reset - 1))  # the day may tick meanwhile
        self.assertNotIn("X-RateLimit-Limit", h)

    def test_wildcard_and_nesting(self):
        codes = [self.s.call(request(desc(("wild", "foobar"))), timeout=10).overall_code for _ in range(2)]
        self.assertEqual(codes, [OK, OVER])
        r = self.s.call(request(desc(("wild", "bar"))), timeout=10)  # no match
        self.assertFalse(r.statuses[0].HasField("current_limit"))
        codes = [self.s.call(request(desc(("nest", "a"), ("leaf", "z"))), timeout=10).overall_code
                 for _ in range(2)]
        self.assertEqual(codes, [OK, OVER])
        r = self.s.call(request(desc(("nest", "b"), ("leaf", "z"))), timeout=10)
        self.assertFalse(r.statuses[0].HasField("current_limit"))

    def test_duration_until_reset(self):
        """Minute windows start on whole minutes of the Unix epoch."""
        before = time.time_ns()
        r = self.s.call(request(desc(("minute", "t"))), timeout=10)
        after = time.time_ns()
        d = r.statuses[0].duration_until_reset.ToNanoseconds()
        w = 60 * 10**9
        lo, hi = w - after % w, w - before % w  # the reset seen at `after` .. at `before`
        if lo <= hi:
            self.assertTrue(lo <= d <= hi, (lo, d, hi))
        else:  # a minute began during the call
            self.assertTrue(d >= lo or d <= hi, (lo, d, hi))

    def test_health(self):
        r = self.s.health(health_pb2.HealthCheckRequest(), timeout=10)
        self.assertEqual(r.status, health_pb2.HealthCheckResponse.SERVING)
        r = self.s.health(health_pb2.HealthCheckRequest(service="envoy.service.ratelimit.v3.RateLimitService"),
                          timeout=10)
        self.assertEqual(r.status, health_pb2.HealthCheckResponse.SERVING)
        with self.assertRaises(grpc.RpcError) as e:
            self.s.health(health_pb2.HealthCheckRequest(service="other"), timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

    def assert_still_serving(self):
        r = self.s.health(health_pb2.HealthCheckRequest(), timeout=10)
        self.assertEqual(r.status, health_pb2.HealthCheckResponse.SERVING)

    def rpc_error(self, path, payload, **kw):
        raw = self.s.channel.unary_unary(path)
        with self.assertRaises(grpc.RpcError) as e:
            raw(payload, timeout=10, **kw)
        self.assert_still_serving()
        return e.exception

    def test_bad_input_grpc(self):
        e = self.rpc_error("/no.Such/Method", b"")
        self.assertEqual(e.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.assertIn("unknown method '/no.Such/Method'", e.details())
        e = self.rpc_error(RLS, b"\xff\xff\xff")
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("malformed RateLimitRequest", e.details())
        e = self.rpc_error(RLS, request(desc(("two", "x" * 10000))).SerializeToString())
        self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("larger than 4096", e.details())
        e = self.rpc_error(RLS, request(desc(("two", "x")), domain="").SerializeToString())
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("domain", e.details())
        e = self.rpc_error(RLS, request().SerializeToString())
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        e = self.rpc_error(RLS, request(desc(("two", "x"))).SerializeToString(), compression=grpc.Compression.Gzip)
        self.assertEqual(e.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.assertIn("grpc-encoding 'gzip'", e.details())

    @unittest.skipUnless(shutil.which("nghttp"), "nghttp (nghttp2-client) is not installed")
    def test_bad_input_http2(self):
        out = nghttp(self.s.port, RLS, b"\0\0\0\0\x64abc")
        self.assertIn("grpc-status: 13", out)
        self.assertIn("truncated gRPC frame: the prefix says 100 bytes, 3 came", out)
        out = nghttp(self.s.port, RLS, b"\0\0")
        self.assertIn("grpc-status: 13", out)
        self.assertIn("truncated gRPC frame: 2 bytes", out)
        good = request(desc(("free", "x"))).SerializeToString()
        out = nghttp(self.s.port, RLS, frame(good) + frame(good))
        self.assertIn("more than one message in a unary call", out)
        out = nghttp(self.s.port, RLS, frame(good), content_type="text/plain")
        self.assertIn(":status: 415", out)
        self.assertIn("content-type 'text/plain' is not application/grpc", out)
        out = nghttp(self.s.port, RLS, b"\x01" + frame(good)[1:])
        self.assertIn("grpc-status: 12", out)
        # Headers past the advertised 16 KiB list: the stream is reset.
        out = nghttp(self.s.port, RLS, frame(good), extra=["x-big: " + "a" * 20000])
        self.assertIn("RST_STREAM", out)
        self.assertNotIn("grpc-status: 0", out)
        out = nghttp(self.s.port, RLS, frame(good))  # and a good one
        self.assertIn("grpc-status: 0", out)
        self.assert_still_serving()

    def test_grpc_timeout(self):
        """A call whose grpc-timeout has passed when its message is whole is answered DEADLINE_EXCEEDED
        and spends nothing; a malformed grpc-timeout is INTERNAL (as grpc-go); a live one is served."""
        msg = frame(request(desc(("two", "deadline"))).SerializeToString())
        for t in ("0n", "0S"):
            out = nghttp(self.s.port, RLS, msg, extra=["grpc-timeout: " + t])
            self.assertIn("grpc-status: 4", out)
            self.assertIn("nothing spent", out)
        for t in ("1x", "123456789S", "S", "-1S", "1.5S", "+1S", "1 S"):
            out = nghttp(self.s.port, RLS, msg, extra=["grpc-timeout: " + t])
            self.assertIn("grpc-status: 13", out, t)
            self.assertIn("malformed grpc-timeout", out, t)
        out = nghttp(self.s.port, RLS, msg, extra=["grpc-timeout: 99999999H"])  # past 2^64 ns: no deadline
        self.assertIn("grpc-status: 0", out)
        got = [self.s.call(request(desc(("two", "deadline"))), timeout=10).overall_code for _ in range(2)]
        self.assertEqual(got, [OK, OVER])  # of 2 a day, only the 99999999H call spent one
        self.assert_still_serving()

    def test_http1_on_grpc_port(self):
        with socket.create_connection(("127.0.0.1", self.s.port), timeout=10) as c:
            c.sendall(b"GET /healthcheck HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while len(data) < 4096:
                chunk = c.recv(4096)
                if not chunk:
                    break
                data += chunk
        self.assertTrue(data.startswith(b"HTTP/1.1 400 "), data)
        self.assertIn(b"gRPC over HTTP/2", data)
        self.assert_still_serving()

    def http(self, head):
        """One HTTP/1.1 request on the HTTP port; returns (status, body)."""
        with socket.create_connection(("127.0.0.1", self.s.http_port), timeout=10) as c:
            c.sendall(head)
            data = b""
            while len(data) < 1 << 20:
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk
        head_, _, body = data.partition(b"\r\n\r\n")
        return int(head_.split()[1]), body.decode()

    def test_http_endpoints(self):
        self.assertEqual(self.http(b"GET /healthcheck HTTP/1.1\r\nHost: x\r\n\r\n"), (200, "OK\n"))
        code, body = self.http(b"GET /rlconfig HTTP/1.1\r\n\r\n")
        self.assertEqual(code, 200)
        self.assertIn("test.two: unit=DAY requests_per_unit=2, shadow_mode: false, unlimited: false\n", body)
        self.assertIn("test.nest_a.leaf: unit=DAY requests_per_unit=1", body)
        self.s.call(request(desc(("two", "metrics"))), timeout=10)
        code, body = self.http(b"GET /metrics HTTP/1.1\r\n\r\n")
        self.assertEqual(code, 200)
        calls = [l for l in body.splitlines() if l.startswith("sluice_rls_calls_total ")]
        self.assertEqual(len(calls), 1)
        self.assertGreaterEqual(int(calls[0].split()[1]), 1)
        if shutil.which("promtool"):
            r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(self.http(b"GET /nope HTTP/1.1\r\n\r\n")[0], 404)
        self.assertEqual(self.http(b"POST /healthcheck HTTP/1.1\r\n\r\n")[0], 405)
        self.assertEqual(self.http(b"GET /" + b"x" * 5000 + b" HTTP/1.1\r\n\r\n")[0], 431)
        self.assert_still_serving()

    def metrics(self):
        """GET /metrics: {series line without value: value}; checked by promtool when present."""
        code, body = self.http(b"GET /metrics HTTP/1.1\r\n\r\n")
        self.assertEqual(code, 200)
        if shutil.which("promtool"):
            r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return {l.rsplit(" ", 1)[0]: float(l.rsplit(" ", 1)[1]) for l in body.splitlines()
                if l and not l.startswith("#")}

    def test_metrics_per_rule(self):
        """Decisions per rule (allowed, denied, shadow_denied) and the decision-time histogram."""
        rule = 'sluice_rls_rule_decisions_total{rule="test.%s",name="%s",decision="%s"}'
        before = self.metrics()
        for _ in range(3):
            self.s.call(request(desc(("two", "perrule"))), timeout=10)
        for _ in range(2):
            self.s.call(request(desc(("shadow", "perrule"))), timeout=10)
        self.s.call(request(desc(("five", "perrule")), hits=0), timeout=10)
        after = self.metrics()
        delta = {k: after[k] - before.get(k, 0) for k in after}
        self.assertEqual(delta[rule % ("two", "", "allowed")], 2)
        self.assertEqual(delta[rule % ("two", "", "denied")], 1)
        self.assertEqual(delta[rule % ("two", "", "shadow_denied")], 0)
        self.assertEqual(delta[rule % ("shadow", "", "allowed")], 1)
        self.assertEqual(delta[rule % ("shadow", "", "shadow_denied")], 1)
        self.assertEqual(delta[rule % ("shadow", "", "denied")], 0)
        self.assertEqual(delta[rule % ("five", "five-a-day", "allowed")], 1)  # hits 1 (max(1, 0))
        self.assertEqual(delta['sluice_rls_decision_seconds_count'], 6)
        self.assertEqual(delta['sluice_rls_decision_seconds_bucket{le="+Inf"}'], 6)
        self.assertGreater(delta['sluice_rls_decision_seconds_sum'], 0)
        # detailed_metric: per descriptor value, bytes not printable ASCII as \\xNN
        for v in ("a", "a", "b", "\u00e9"):
            self.s.call(request(desc(("detail", v))), timeout=10)
        m = self.metrics()
        d = 'sluice_rls_rule_detail_decisions_total{rule="test.detail",descriptor="test.detail_%s",decision="%s"}'
        self.assertEqual(m[d % ("a", "allowed")], 1)
        self.assertEqual(m[d % ("a", "denied")], 1)
        self.assertEqual(m[d % ("b", "allowed")], 1)
        self.assertEqual(m[d % ("\\\\xc3\\\\xa9", "allowed")], 1)
        self.assertFalse([k for k in m if "detail_decisions" in k and "test.two" in k])
        self.assertLessEqual(after['sluice_rls_decision_seconds_bucket{le="1e-06"}'],
                             after['sluice_rls_decision_seconds_bucket{le="1"}'])

    def post_json(self, body):
        """POST /json with urllib; returns (status, parsed JSON body)."""
        req = urllib.request.Request("http://127.0.0.1:%d/json" % self.s.http_port, data=body,
                                     headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def test_post_json(self):
        """envoyproxy/ratelimit's POST /json: 200 OK, 429 OVER_LIMIT, 400 bad JSON; the body is protojson."""
        one = json.dumps({"domain": "test", "descriptors": [{"entries": [{"key": "two", "value": "json"}]}]})
        got = [self.post_json(one.encode()) for _ in range(3)]
        self.assertEqual([g[0] for g in got], [200, 200, 429])
        self.assertEqual([g[1]["overallCode"] for g in got], ["OK", "OK", "OVER_LIMIT"])
        st = got[0][1]["statuses"][0]
        self.assertEqual(st["code"], "OK")
        self.assertEqual(st["limitRemaining"], 1)
        self.assertEqual(st["currentLimit"], {"requestsPerUnit": 2, "unit": "DAY"})
        self.assertRegex(st["durationUntilReset"], r"^[0-9]+(\.[0-9]{3,9})?s$")
        self.assertNotIn("limitRemaining", got[2][1]["statuses"][0])  # 0: left out, as protojson does
        # The gRPC call and /json spend the same counter.
        self.assertEqual(self.s.call(request(desc(("two", "json"))), timeout=10).overall_code, OVER)
        # camelCase, hits as a string, an escaped value, a name in the answer.
        code, b = self.post_json(b'{"domain":"test","descriptors":[{"entries":[{"key":"five","value":"j\\u00e9"}],'
                                 b'"hitsAddend":"5"}]}')
        self.assertEqual((code, b["statuses"][0]["currentLimit"]["name"]), (200, "five-a-day"))
        self.assertEqual(self.s.call(request(desc(("five", "j\u00e9"))), timeout=10).overall_code, OVER)
        # Bad input: 400 with a reason naming the token, and nothing spent.
        for bad, word in [(b"", "expected"), (b"{", "ended"), (b'{"domain":"test",}', "string expected"),
                          (b'{"domain":"test","nope":1}', "nope"), (b'{"domain":"test","domain":"x"}', "twice"),
                          (b'{"domain":"test","hits_addend":4294967296}', "larger"),
                          (b'{"domain":"test","hits_addend":-1}', "unsigned"),
                          (b'{"domain":"te\\u0000st"}', "u0000"), (b'{"domain":"test"} x', "after"),
                          (b'{"domain":"test","descriptors":[' + b",".join([b'{"entries":[]}'] * 65) + b"]}",
                           "more than 64"),
                          (b'{"domain":"test","descriptors":[{"entries":[{"key":"two","value":"bad"}],'
                           b'"limit":{"unit":"FORTNIGHT"}}]}', "FORTNIGHT"),
                          (b'{"domain":"test","descriptors":[{"entries":[{"key":"two","value":"bad"}]}]]', "','")]:
            code, b = self.post_json(bad)
            self.assertEqual(code, 400, bad)
            self.assertIn(word, b["error"], bad)
        ok = json.dumps({"domain": "test", "descriptors": [{"entries": [{"key": "two", "value": "bad"}]}]})
        self.assertEqual([self.post_json(ok.encode())[0] for _ in range(3)], [200, 200, 429])
        # A body larger than SLUICE_RLS_MAX_MSG_BYTES (4096 here): 413.
        self.assertEqual(self.http(b"POST /json HTTP/1.1\r\nContent-Length: 5000\r\n\r\n")[0], 413)
        # Content-Length's edges (sluice_parse_u64): past 2^64 is too large,
        # not wrapped; a sign, a fraction, junk, an empty or split number: 400.
        for v, want in ((b"99999999999999999999999", 413), (b"18446744073709551616", 413), (b" 5000 \t", 413),
                        (b"12a", 400), (b"+5", 400), (b"-5", 400), (b"1.5", 400), (b"", 400), (b"1 2", 400)):
            self.assertEqual(self.http(b"POST /json HTTP/1.1\r\nContent-Length:" + v + b"\r\n\r\n")[0], want, v)
        self.assertEqual(self.http(b"POST /json HTTP/1.1\r\n\r\n")[0], 411)
        self.assertEqual(self.http(b"POST /json HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")[0], 411)
        self.assert_still_serving()

    def test_exact_from_four_processes(self):
        """4 client processes x 250 calls against one limit of 500 (a year's
        window): exactly 500 admitted, counted by the clients."""
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--hammer", str(self.s.port),
                                   "exact", "250", GEN], stdout=subprocess.PIPE, text=True) for _ in range(4)]
        res = []
        for p in procs:
            out, _ = p.communicate(timeout=300)
            self.assertEqual(p.returncode, 0)
            res.append(tuple(int(x) for x in out.split()[:3]))
        for _, first, last in res:
            self.assertLessEqual(last, first, "the window changed during the test")
        self.assertEqual(sum(ok for ok, _, _ in res), 500)


RELOAD_A = """
domain: test
descriptors:
  - key: r
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: shared
    rate_limit: {unit: year, requests_per_unit: 3000}
"""


class ReloadTest(unittest.TestCase):
    def test_reload_keeps_counters(self):
        s = Server(config=RELOAD_A, SLUICE_RLS_RELOAD_MS=20, SLUICE_RLS_MAX_KEYS=64)
        try:
            for want in (2, 1):
                r = s.call(request(desc(("r", "x"))), timeout=10)
                self.assertEqual(r.statuses[0].limit_remaining, want)
            # 3 -> 5 a day, and a new key: the window keeps its 1 admitted.
            s.write_config(RELOAD_A.replace("requests_per_unit: 3", "requests_per_unit: 5") +
                           "  - key: q\n    rate_limit: {unit: day, requests_per_unit: 1}\n")
            s.wait_stderr("reloaded: 1 domains, 3 limits, 2 kept their counters")
            r = s.call(request(desc(("r", "x"))), timeout=10)
            self.assertEqual((r.overall_code, r.statuses[0].limit_remaining), (OK, 2))
            self.assertEqual(r.statuses[0].current_limit.requests_per_unit, 5)
            self.assertEqual(s.call(request(desc(("q", "x"))), timeout=10).overall_code, OK)
            self.assertEqual(s.call(request(desc(("q", "x"))), timeout=10).overall_code, OVER)
            # A bad file: refused with its line, the config in force stays.
            s.write_config(RELOAD_A + "  - key: bad\n    rate_limit: {unit: fortnight}\n")
            s.wait_stderr("reload refused")
            self.assertIn("c.yaml:9: invalid rate limit unit 'fortnight'", s.stderr())
            r = s.call(request(desc(("r", "x"))), timeout=10)
            self.assertEqual((r.overall_code, r.statuses[0].limit_remaining), (OK, 1))
            self.assertEqual(s.call(request(desc(("q", "x"))), timeout=10).overall_code, OVER)
        finally:
            self.assertEqual(s.stop(), 0)

    def test_reload_under_load(self):
        """4 client processes x 1000 calls on one limit of 3000 while the
        config is reloaded 5 times: no call fails, exactly 3000 are admitted."""
        # Small tables (SLUICE_RLS_MAX_KEYS) load fast, so that the reloads
        # come while the clients still have calls to make, even under TSan.
        s = Server(config=RELOAD_A, SLUICE_RLS_RELOAD_MS=10, SLUICE_RLS_MAX_KEYS=64)
        try:
            procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--hammer", str(s.port),
                                       "reload", "1000", GEN], stdout=subprocess.PIPE, text=True)
                     for _ in range(4)]
            probe = request(desc(("shared", "reload"), hits=0))
            for i in range(5):
                # Each reload once the clients have taken 50 more (bounded wait).
                t0 = time.monotonic()
                while s.call(probe, timeout=10).statuses[0].limit_remaining > 2950 - 50 * i:
                    self.assertLess(time.monotonic() - t0, 120, "the clients make no progress")
                    time.sleep(0.005)
                s.write_config(RELOAD_A + "# change %d\n" % i)
                s.wait_stderr("reloaded:", count=i + 1)
            self.assertGreater(s.call(probe, timeout=10).statuses[0].limit_remaining, 0,
                               "the reloads came after the limit was reached: they proved nothing")
            res = []
            for p in procs:
                out, _ = p.communicate(timeout=300)
                self.assertEqual(p.returncode, 0)
                res.append(tuple(int(x) for x in out.split()))
            self.assertEqual(sum(ok for ok, _, _, _ in res), 3000)
            self.assertEqual(sum(late for _, _, _, late in res), 0, "a call was refused while the limit allowed it")
        finally:
            self.assertEqual(s.stop(), 0)


class InotifyTest(unittest.TestCase):
    def test_reload_by_inotify(self):
        """The config directory is watched: with the polling period at an
        hour, each change is picked up at once (bounded wait of 20 s, for a
        loaded machine): a file renamed into place (`mv`), one written in
        place, a Kubernetes ConfigMap's `..data` symlink swap, and a swap
        of the RUNTIME_ROOT symlink itself."""
        top = tempfile.mkdtemp(prefix="rls-ino-")
        try:
            for v in ("v1", "v2"):
                os.makedirs(os.path.join(top, v, "ratelimit", "config"))
                with open(os.path.join(top, v, "ratelimit", "config", "c.yaml"), "w") as f:
                    f.write(RELOAD_A)
            link = os.path.join(top, "current")
            os.symlink(os.path.join(top, "v1"), link)
            s = Server(config=RELOAD_A, RUNTIME_ROOT=link, SLUICE_RLS_RELOAD_MS=3600000)
            d = os.path.join(link, "ratelimit", "config")
            try:
                def limit():
                    return s.call(request(desc(("r", "x"), hits=0)), timeout=10).statuses[0].current_limit

                def cfg(n):
                    return RELOAD_A.replace("requests_per_unit: 3", "requests_per_unit: %d" % n)
                self.assertEqual(limit().requests_per_unit, 3)
                # mv into place
                with open(os.path.join(d, ".new"), "w") as f:
                    f.write(cfg(4))
                os.replace(os.path.join(d, ".new"), os.path.join(d, "c.yaml"))
                s.wait_stderr("reloaded:", 1, limit_s=20)
                self.assertEqual(limit().requests_per_unit, 4)
                # written in place
                with open(os.path.join(d, "c.yaml"), "w") as f:
                    f.write(cfg(5))
                s.wait_stderr("reloaded:", 2, limit_s=20)
                self.assertEqual(limit().requests_per_unit, 5)
                # a ConfigMap: c.yaml -> ..data/c.yaml, ..data -> ..v1, swapped to ..v2
                for v, n in (("..v1", 6), ("..v2", 7)):
                    os.makedirs(os.path.join(d, v))
                    with open(os.path.join(d, v, "c.yaml"), "w") as f:
                        f.write(cfg(n))
                os.symlink("..v1", os.path.join(d, "..data"))
                os.symlink("..data/c.yaml", os.path.join(d, ".c.tmp"))
                os.replace(os.path.join(d, ".c.tmp"), os.path.join(d, "c.yaml"))
                s.wait_stderr("reloaded:", 3, limit_s=20)
                self.assertEqual(limit().requests_per_unit, 6)
                os.symlink("..v2", os.path.join(d, "..data_tmp"))
                os.replace(os.path.join(d, "..data_tmp"), os.path.join(d, "..data"))
                s.wait_stderr("reloaded:", 4, limit_s=20)
                self.assertEqual(limit().requests_per_unit, 7)
                # RUNTIME_ROOT's symlink swapped to another tree (v2: 3 a day)
                os.symlink(os.path.join(top, "v2"), os.path.join(top, ".cur.tmp"))
                os.replace(os.path.join(top, ".cur.tmp"), link)
                s.wait_stderr("reloaded:", 5, limit_s=20)
                self.assertEqual(limit().requests_per_unit, 3)
                # and the watch follows it: a change in v2 is seen too
                with open(os.path.join(top, "v2", "ratelimit", "config", "c.yaml"), "w") as f:
                    f.write(cfg(8))
                s.wait_stderr("reloaded:", 6, limit_s=20)
                self.assertEqual(limit().requests_per_unit, 8)
            finally:
                self.assertEqual(s.stop(), 0)
        finally:
            shutil.rmtree(top, ignore_errors=True)


def h2_frame(ftype, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + stream.to_bytes(4, "big") + payload


def hpack_literal(name, value):
    """A header field as an HPACK literal without indexing, new name
    (RFC 7541 6.2.2), for names and values under 127 bytes."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def h2_frames(data):
    """The frames in `data`: a list of (type, stream, first 8 payload bytes)."""
    out, i = [], 0
    while i + 9 <= len(data):
        n = int.from_bytes(data[i:i + 3], "big")
        out.append((data[i + 3], int.from_bytes(data[i + 5:i + 9], "big") & 0x7FFFFFFF, data[i + 9:i + 9 + min(n, 8)]))
        i += 9 + n
    return out


class FloodTest(unittest.TestCase):
    """HTTP/2 floods from a hand-written client: the server answers or
    closes that connection, and keeps serving the others."""

    HEADERS = (hpack_literal(b":method", b"POST") + hpack_literal(b":scheme", b"http") +
               hpack_literal(b":path", RLS.encode()) + hpack_literal(b":authority", b"x") +
               hpack_literal(b"content-type", b"application/grpc") + hpack_literal(b"te", b"trailers"))

    def flood(self, s, frames):
        """Send the preface, SETTINGS and `frames`; read until the server
        closes or 10 s pass; returns the bytes read."""
        got = b""
        with socket.create_connection(("127.0.0.1", s.port), timeout=10) as c:
            c.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0))
            try:
                c.sendall(frames)
                c.settimeout(2)
                t0 = time.monotonic()
                while time.monotonic() - t0 < 10:
                    chunk = c.recv(65536)
                    if not chunk:
                        break
                    got += chunk
            except (ConnectionResetError, BrokenPipeError, socket.timeout):
                pass
        return got

    def test_rapid_reset_and_stream_floods(self):
        s = Server()
        try:
            # Rapid reset: 5000 streams opened and reset at once.
            frames = b"".join(h2_frame(1, 4, 2 * i + 1, self.HEADERS) +  # HEADERS, END_HEADERS
                              h2_frame(3, 0, 2 * i + 1, (8).to_bytes(4, "big"))  # RST_STREAM CANCEL
                              for i in range(5000))
            got = h2_frames(self.flood(s, frames))
            self.assertIn(7, [t for t, _, _ in got], "no GOAWAY for a rapid-reset flood: %r" % got[:10])
            # Stream flood: 1000 streams opened, none ended (the limit is
            # 100): the others refused (RST_STREAM REFUSED_STREAM).
            frames = b"".join(h2_frame(1, 4, 2 * i + 1, self.HEADERS) for i in range(1000))
            got = h2_frames(self.flood(s, frames))
            refused = [sid for t, sid, p in got if t == 3 and p[:4] == (7).to_bytes(4, "big")]
            self.assertGreaterEqual(len(refused), 900 - 1, "streams past the limit were not refused")
            # Still serving, promptly.
            t0 = time.monotonic()
            r = s.health(health_pb2.HealthCheckRequest(), timeout=10)
            self.assertEqual(r.status, health_pb2.HealthCheckResponse.SERVING)
            self.assertLess(time.monotonic() - t0, 10)
        finally:
            self.assertEqual(s.stop(), 0)


SLOW_CONFIG = """
domain: test
descriptors:
  - key: slow
    rate_limit: {unit: year, requests_per_unit: 1000000000}
  - key: fast
    rate_limit: {unit: year, requests_per_unit: 1000000000}
"""


def proc_usage(pid):
    """(VmRSS in bytes, utime + stime in seconds) of process pid, from /proc."""
    with open("/proc/%d/status" % pid) as f:
        rss = [int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:")][0]
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return rss, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class SlowReadTest(unittest.TestCase):
    """Slow readers: a client that sends requests as fast as it can and
    never reads an answer (its receive buffer fills, then the server's send
    buffer).  The server stops reading that connection while the socket
    takes none of its answers, so it decides no more of its requests, holds
    a bounded amount for it, spends no CPU on it, and closes it (a reset)
    after the idle bound; a client beside it on the same worker is served
    throughout."""

    IDLE_S = 6
    # Under AddressSanitizer freed blocks wait in its quarantine (256 MB by
    # default), so RSS would measure that: a small one here.
    ENV = dict(ASAN_OPTIONS=":".join(x for x in (os.environ.get("ASAN_OPTIONS"), "quarantine_size_mb=1",
                                                  "thread_local_quarantine_size_kb=64") if x))

    def slow_call(self, sid):
        """One ShouldRateLimit call on stream sid, HPACK literals (no
        index: every call the same size), the message in one DATA frame."""
        body = frame(raw_request(b"test", [[(b"slow", b"reader")]]))
        return h2_frame(1, 4, sid, FloodTest.HEADERS) + h2_frame(0, 1, sid, body)

    def push(self, so, chunks, total, stall_s=2, limit_s=120):
        """Send chunks() until total bytes went, or the socket took nothing
        for stall_s (the server stopped reading), or limit_s passed.
        Returns (bytes sent, stuck)."""
        import select
        import ssl
        so.setblocking(False)
        sent, t0 = 0, time.monotonic()
        pending = b""
        while sent < total and time.monotonic() - t0 < limit_s:
            if not pending:
                pending = next(chunks)
            try:
                n = so.send(pending)
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                n = 0
            except (ConnectionResetError, BrokenPipeError):
                return sent, False
            sent += n
            pending = pending[n:]
            if n == 0 and not select.select([], [so], [], stall_s)[1]:
                return sent, True
        return sent, False

    def wait_reset(self, so, limit_s):
        """Does the server close so (a reset, or EOF) within limit_s,
        without so reading a byte?  Returns the seconds it took, or None."""
        import select
        p = select.poll()
        p.register(so.fileno(), select.POLLERR | select.POLLHUP | select.POLLRDHUP)
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit_s:
            if p.poll(200):
                return time.monotonic() - t0
        return None

    def metric(self, s, key):
        """One series of /metrics (0 when absent)."""
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % s.http_port, timeout=30) as h:
            body = h.read().decode()
        got = [int(l[len(key) + 1:]) for l in body.splitlines() if l.startswith(key + " ")]
        return got[0] if got else 0

    def decided(self, s):
        return self.metric(s, 'sluice_rls_rule_decisions_total{rule="test.slow",name="",decision="allowed"}')

    def check_slow_reader(self, s, so, chunks, per_call, served):
        """Push 50 MB from so and never read; then check (a)-(d)."""
        rss0, _ = proc_usage(s.proc.pid)
        sent, stuck = self.push(so, chunks, 50 << 20)
        rss1, cpu1 = proc_usage(s.proc.pid)
        # (a) a client on the same (only) worker is served, promptly.
        for i in range(20):
            t0 = time.monotonic()
            served(i)
            self.assertLess(time.monotonic() - t0, 5, "a call beside the slow reader took over 5 s")
        # (c) the calls decided for it: what the kernel buffers (the
        # server's send buffer grows to tcp_wmem's maximum), the server's
        # bound (256 KiB) and one read (100 streams) hold, in answers of
        # at least per_call bytes -- not what the client sent.
        with open("/proc/sys/net/ipv4/tcp_wmem") as f:
            wmem = int(f.read().split()[2])
        n = self.decided(s)
        bound = (wmem + (1 << 20)) // per_call + 100
        self.assertLessEqual(n, bound, "decided %d calls for a client that read nothing (sent %d bytes)" % (n, sent))
        self.assertLess(n * 2, sent // len(self.slow_call(1)), "the test sent too few calls to tell")
        # (b) memory: under 32 MB more than before it came.
        self.assertLess(rss1 - rss0, 32 << 20, "RSS grew by %d bytes" % (rss1 - rss0))
        # (d) closed after the idle bound (6 s, swept each second; 30 s for
        # a loaded machine), with a reset: the client needs not read; no
        # CPU spent on it meanwhile (a spinning worker would take seconds).
        took = self.wait_reset(so, 30)
        self.assertIsNotNone(took, "a connection that read nothing outlived the idle bound")
        _, cpu2 = proc_usage(s.proc.pid)
        self.assertLess(cpu2 - cpu1, 0.5, "%.2f s of CPU while the slow reader was stuck" % (cpu2 - cpu1))
        self.assertEqual(self.decided(s), n, "calls decided after the client stopped being read")
        self.assertEqual(self.metric(s, 'sluice_rls_connections_closed_total{reason="stalled"}'), 1)
        # The client's sends stopped: the server read no more of it.
        self.assertTrue(stuck, "the server read all %d bytes of a client that reads nothing" % sent)
        return n, sent, rss1 - rss0, cpu2 - cpu1, took

    def h2_slow_reader(self, s, tls_ctx=None):
        so = socket.socket()
        so.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        so.settimeout(10)
        so.connect(("127.0.0.1", s.port))
        if tls_ctx:
            so = tls_ctx.wrap_socket(so, server_hostname="localhost")
        # The largest windows (a flow-controlled client would not get its
        # answers sent either), then calls, never a read.
        so.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" +
                   h2_frame(4, 0, 0, (4).to_bytes(2, "big") + (2**31 - 1).to_bytes(4, "big")) +
                   h2_frame(8, 0, 0, (2**31 - 1 - 65535).to_bytes(4, "big")))

        def chunks():
            sid = 1
            while True:
                yield b"".join(self.slow_call(sid + 2 * i) for i in range(200))
                sid += 400
        return so, chunks()

    def grpc_case(self, tls):
        import ssl
        env = dict(self.ENV, SLUICE_RLS_WORKERS=1, SLUICE_RLS_IDLE_SECONDS=self.IDLE_S)
        ctx = None
        if tls:
            d = tempfile.mkdtemp(prefix="rls-tls-")
            crt, key = os.path.join(d, "c.pem"), os.path.join(d, "k.pem")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                            "-nodes", "-days", "2", "-subj", "/CN=localhost", "-addext",
                            "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", key, "-out", crt],
                           check=True, capture_output=True, timeout=60)
            env.update(GRPC_SERVER_USE_TLS="true", GRPC_SERVER_TLS_CERT=crt, GRPC_SERVER_TLS_KEY=key)
            ctx = ssl.create_default_context(cafile=crt)
            ctx.set_alpn_protocols(["h2"])
        s = Server(config=SLOW_CONFIG, **env)
        try:
            if tls:
                with open(crt, "rb") as f:
                    creds = grpc.ssl_channel_credentials(root_certificates=f.read())
                ch = grpc.secure_channel("127.0.0.1:%d" % s.port, creds,
                                         options=[("grpc.ssl_target_name_override", "localhost")])
            else:
                ch = grpc.insecure_channel("127.0.0.1:%d" % s.port)
            call = ch.unary_unary(RLS, request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
                                  response_deserializer=rls_pb2.RateLimitResponse.FromString)
            self.assertEqual(call(request(desc(("fast", "warm"))), timeout=10).overall_code, OK)
            so, chunks = self.h2_slow_reader(s, ctx)
            try:
                def served(i):
                    r = call(request(desc(("fast", "beside"))), timeout=10)
                    self.assertEqual((r.overall_code, r.statuses[0].limit_remaining), (OK, 10**9 - 1 - i))
                # An answer is over 100 bytes on the wire (HEADERS, DATA
                # with the message, trailers).
                got = self.check_slow_reader(s, so, chunks, 100, served)
                print("slow reader (%s): decided %d, sent %d bytes, RSS +%d, CPU %.2f s stuck, reset after %.1f s" %
                      ((("tls" if tls else "cleartext"),) + got), file=sys.stderr)
            finally:
                so.close()
            ch.close()
        finally:
            self.assertEqual(s.stop(), 0)
            if tls:
                shutil.rmtree(d, ignore_errors=True)

    def test_grpc_slow_reader(self):
        self.grpc_case(False)

    @unittest.skipUnless(shutil.which("openssl"), "openssl (the command) makes the test's certificate")
    def test_grpc_slow_reader_tls(self):
        self.grpc_case(True)

    def test_grpc_reader_slow_but_reading(self):
        """A client that reads its answers, slowly (8 KiB of a send buffer
        of megabytes every 0.1 s: the socket reports no room for many
        seconds), makes progress: it is not closed in 3 idle bounds."""
        s = Server(config=SLOW_CONFIG, SLUICE_RLS_WORKERS=1, SLUICE_RLS_IDLE_SECONDS=3, **self.ENV)
        try:
            so, chunks = self.h2_slow_reader(s)
            try:
                # Stalled for 0.5 s: it begins to read well within the
                # idle bound (3 s), which starts at the server's last send.
                _, stuck = self.push(so, chunks, 50 << 20, stall_s=0.5)
                self.assertTrue(stuck)
                got, t0 = 0, time.monotonic()
                while time.monotonic() - t0 < 10:
                    try:
                        data = so.recv(8192)
                    except BlockingIOError:
                        data = None
                    except ConnectionResetError:
                        self.fail("reset after %.1f s, having read %d bytes" % (time.monotonic() - t0, got))
                    self.assertNotEqual(data, b"", "closed after %.1f s" % (time.monotonic() - t0))
                    got += len(data or b"")
                    time.sleep(0.1)
                self.assertGreater(got, 0)
                self.assertEqual(self.metric(s, 'sluice_rls_connections_closed_total{reason="stalled"}'), 0)
                print("slow but reading: read %d bytes in 10 s, not closed" % got, file=sys.stderr)
            finally:
                so.close()
        finally:
            self.assertEqual(s.stop(), 0)

    def test_stop_with_a_slow_reader(self):
        """SIGTERM while a slow reader's answers wait: the drain bound (5 s)
        ends it, and the server exits 0."""
        s = Server(config=SLOW_CONFIG, SLUICE_RLS_WORKERS=1, **self.ENV)
        so, chunks = self.h2_slow_reader(s)
        try:
            _, stuck = self.push(so, chunks, 50 << 20, stall_s=0.5)
            self.assertTrue(stuck)
            t0 = time.monotonic()
            self.assertEqual(s.stop(), 0)
            self.assertLess(time.monotonic() - t0, 15)
        finally:
            so.close()

    def test_http1_slow_reader(self):
        """Pipelined POST /json on one connection, never read: the port
        serves one request per connection, so one is decided, answered and
        followed by the server's half-close (seen without reading); the
        rest is read and dropped until the idle bound."""
        s = Server(config=SLOW_CONFIG, SLUICE_RLS_WORKERS=1, SLUICE_RLS_IDLE_SECONDS=self.IDLE_S, **self.ENV)
        try:
            body = json.dumps({"domain": "test", "descriptors": [{"entries": [{"key": "slow", "value": "r"}]}]})
            one = ("POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)).encode()
            so = socket.socket()
            so.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            so.settimeout(10)
            so.connect(("127.0.0.1", s.http_port))

            def chunks():
                while True:
                    yield one * 200

            def served(i):
                r = s.call(request(desc(("fast", "beside"))), timeout=10)
                self.assertEqual((r.overall_code, r.statuses[0].limit_remaining), (OK, 10**9 - 1 - i))
            try:
                rss0, cpu0 = proc_usage(s.proc.pid)
                sent, _ = self.push(so, chunks(), 50 << 20, limit_s=60)
                for i in range(20):
                    t0 = time.monotonic()
                    served(i)
                    self.assertLess(time.monotonic() - t0, 5, "a call beside the slow reader took over 5 s")
                self.assertEqual(self.decided(s), 1)
                rss1, _ = proc_usage(s.proc.pid)
                self.assertLess(rss1 - rss0, 32 << 20, "RSS grew by %d bytes" % (rss1 - rss0))
                self.assertIsNotNone(self.wait_reset(so, 30), "no half-close after the answer")
                print("slow reader (http/1.1): sent %d bytes, RSS +%d" % (sent, rss1 - rss0), file=sys.stderr)
            finally:
                so.close()
        finally:
            self.assertEqual(s.stop(), 0)


class SharedTest(unittest.TestCase):
    def test_two_servers_one_limit(self):
        """SLUICE_RLS_SHARED_DIR: two sluice-rls processes, 2 client
        processes on each, 250 calls each, one limit of 500: exactly 500."""
        shm = tempfile.mkdtemp(prefix="rls-shm-")
        servers = []
        try:
            for _ in range(2):
                servers.append(Server(SLUICE_RLS_SHARED_DIR=shm, SLUICE_RLS_MAX_KEYS=64))
            procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--hammer",
                                       str(servers[i % 2].port), "shm", "250", GEN],
                                      stdout=subprocess.PIPE, text=True) for i in range(4)]
            res = []
            for p in procs:
                out, _ = p.communicate(timeout=300)
                self.assertEqual(p.returncode, 0)
                res.append(tuple(int(x) for x in out.split()[:3]))
            for _, first, last in res:
                self.assertLessEqual(last, first, "the window changed during the test")
            self.assertEqual(sum(ok for ok, _, _ in res), 500)
            # A process whose config gives a shared limit another spec is refused.
            with self.assertRaises(RuntimeError) as e:
                Server(config=CONFIG.replace("requests_per_unit: 500", "requests_per_unit: 501"),
                       SLUICE_RLS_SHARED_DIR=shm, SLUICE_RLS_MAX_KEYS=64)
            self.assertIn("shared table " + shm, str(e.exception))
        finally:
            for sv in servers:
                self.assertEqual(sv.stop(), 0)
            shutil.rmtree(shm, ignore_errors=True)


class LimitsTest(unittest.TestCase):
    """Bounds that need a server of their own."""

    def test_idle_connection_closed(self):
        s = Server(SLUICE_RLS_IDLE_SECONDS=1)
        try:
            with socket.create_connection(("127.0.0.1", s.port), timeout=15) as c:
                t0 = time.monotonic()
                c.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")  # preface, then nothing
                closed = False
                while time.monotonic() - t0 < 15:
                    if not c.recv(4096):
                        closed = True
                        break
                self.assertTrue(closed, "an idle connection was kept for 15 s")
        finally:
            self.assertEqual(s.stop(), 0)

    def test_connection_limit(self):
        s = Server(SLUICE_RLS_MAX_CONNS=2)
        try:
            held = [socket.create_connection(("127.0.0.1", s.port), timeout=10) for _ in range(2)]
            for c in held:
                c.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                c.recv(4096)  # the server's SETTINGS: accepted
            extra = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            extra.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            try:
                self.assertEqual(extra.recv(4096), b"", "a third connection was served")
            except ConnectionResetError:
                pass
            for c in held + [extra]:
                c.close()
        finally:
            self.assertEqual(s.stop(), 0)

    def test_headers_legacy(self):
        """SLUICE_RLS_HEADERS=legacy: envoyproxy/ratelimit's X-RateLimit-*
        of the descriptor with the least remaining."""
        s = Server(SLUICE_RLS_HEADERS="legacy")
        try:
            r = s.call(request(desc(("five", "l")), desc(("two", "l"))), timeout=10)
            h = {x.key: x.value for x in r.response_headers_to_add}
            self.assertEqual((h["X-RateLimit-Limit"], h["X-RateLimit-Remaining"]), ("2", "1"))
            self.assertTrue(0 < int(h["X-RateLimit-Reset"]) <= 86400)
            self.assertNotIn("RateLimit", h)
        finally:
            self.assertEqual(s.stop(), 0)
        r = subprocess.run([BIN], env=dict(os.environ, SLUICE_RLS_HEADERS="all"), capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("SLUICE_RLS_HEADERS='all' is not draft, legacy, both or off", r.stderr)

    def test_bad_environment(self):
        r = subprocess.run([BIN], env=dict(os.environ, GRPC_PORT="70000"), capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("GRPC_PORT='70000'", r.stderr)
        # The numbers are digits only (sluice_parse_u64): no sign, no space, no junk.
        for name, v in (("SLUICE_RLS_WORKERS", "+2"), ("SLUICE_RLS_WORKERS", " 2"), ("SLUICE_RLS_IDLE_SECONDS", "5s"),
                        ("SLUICE_RLS_MAX_KEYS", "-1"), ("PORT", "18446744073709551617"), ("SLUICE_RLS_RELOAD_MS", "0x10")):
            r = subprocess.run([BIN], env=dict(os.environ, **{name: v}), capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, (name, v))
            self.assertIn("%s='%s' is not an integer from" % (name, v), r.stderr)
        r = subprocess.run([BIN], env=dict(os.environ, RUNTIME_ROOT="/nonexistent-rls"), capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("/nonexistent-rls/ratelimit/config", r.stderr)


MD_CONFIG = """
domain: test
descriptors:
  - key: md
    metadata: {team: a, limits: {kind: strict, n: 3}, tags: [x, 1, true, null]}
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: md2
    metadata: {team: b, limits: {extra: "yes"}}
    rate_limit: {unit: day, requests_per_unit: 5}
"""


class DynamicMetadataTest(unittest.TestCase):
    def test_dynamic_metadata(self):
        """RESPONSE_DYNAMIC_METADATA=true (envoyproxy/ratelimit's): the
        answer's dynamic_metadata holds the domain, the descriptors
        ("key=value" entries, hitsAddend), the request's hitsAddend, and the
        `metadata` of the descriptors that passed, merged (the first value of
        a key stays, structs merge); the same in POST /json."""
        s = Server(config=MD_CONFIG, RESPONSE_DYNAMIC_METADATA="true")
        try:
            from google.protobuf import json_format
            r = s.call(request(desc(("md", "a")), desc(("md2", "a"), hits=1), hits=1), timeout=10)
            self.assertEqual(r.overall_code, OK)
            got = json_format.MessageToDict(r.dynamic_metadata)
            self.assertEqual(got, {
                "domain": "test", "hitsAddend": 1.0,
                "descriptors": [{"entries": ["md=a"]}, {"entries": ["md2=a"], "hitsAddend": 1.0}],
                "metadata": {"team": "a", "limits": {"kind": "strict", "n": 3.0, "extra": "yes"},
                             "tags": ["x", 1.0, True, None]}})
            # md is over now: only md2's metadata
            r = s.call(request(desc(("md", "a")), desc(("md2", "a"))), timeout=10)
            self.assertEqual(r.overall_code, OVER)
            got = json_format.MessageToDict(r.dynamic_metadata)
            self.assertEqual(got["metadata"], {"team": "b", "limits": {"extra": "yes"}})
            self.assertNotIn("hitsAddend", got)
            body = json.dumps({"domain": "test", "descriptors": [{"entries": [{"key": "md2", "value": "j"}]}]})
            req = urllib.request.Request("http://127.0.0.1:%d/json" % s.http_port, data=body.encode(), method="POST")
            with urllib.request.urlopen(req, timeout=10) as h:
                js = json.loads(h.read())
            self.assertEqual(js["dynamicMetadata"], {"domain": "test", "descriptors": [{"entries": ["md2=j"]}],
                                                     "metadata": {"team": "b", "limits": {"extra": "yes"}}})
        finally:
            self.assertEqual(s.stop(), 0)
        # Without the variable: none.
        s = Server(config=MD_CONFIG)
        try:
            r = s.call(request(desc(("md2", "n"))), timeout=10)
            self.assertFalse(r.HasField("dynamic_metadata"))
        finally:
            self.assertEqual(s.stop(), 0)


@unittest.skipUnless(shutil.which("openssl"), "openssl (the command) makes the test's certificate")
class TlsTest(unittest.TestCase):
    def test_grpc_over_tls(self):
        """GRPC_SERVER_USE_TLS (envoyproxy/ratelimit's names): grpcio's
        ssl_channel_credentials with the test's self-signed certificate call
        ShouldRateLimit and Health over TLS (ALPN h2); a cleartext client
        fails and the server goes on; a bad key or a missing file is refused
        at start with its reason."""
        d = tempfile.mkdtemp(prefix="rls-tls-")
        crt, key = os.path.join(d, "c.pem"), os.path.join(d, "k.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                        "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                        "-keyout", key, "-out", crt], check=True, capture_output=True, timeout=60)
        s = Server(GRPC_SERVER_USE_TLS="true", GRPC_SERVER_TLS_CERT=crt, GRPC_SERVER_TLS_KEY=key)
        try:
            with open(crt, "rb") as f:
                creds = grpc.ssl_channel_credentials(root_certificates=f.read())
            ch = grpc.secure_channel("127.0.0.1:%d" % s.port, creds,
                                     options=[("grpc.ssl_target_name_override", "localhost")])
            call = ch.unary_unary(RLS, request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
                                  response_deserializer=rls_pb2.RateLimitResponse.FromString)
            got = [call(request(desc(("two", "tls"))), timeout=10).overall_code for _ in range(3)]
            self.assertEqual(got, [OK, OK, OVER])
            health = ch.unary_unary(HEALTH, request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                                    response_deserializer=health_pb2.HealthCheckResponse.FromString)
            self.assertEqual(health(health_pb2.HealthCheckRequest(), timeout=10).status,
                             health_pb2.HealthCheckResponse.SERVING)
            with self.assertRaises(grpc.RpcError):  # cleartext HTTP/2 on the TLS port
                s.call(request(desc(("two", "clear"))), timeout=5)
            self.assertEqual(call(request(desc(("five", "tls"))), timeout=10).overall_code, OK)
            ch.close()
        finally:
            self.assertEqual(s.stop(), 0)
        for env, msg in (({"GRPC_SERVER_TLS_CERT": crt}, "needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"),
                         ({"GRPC_SERVER_TLS_CERT": crt, "GRPC_SERVER_TLS_KEY": crt},
                          "TLS: cannot load the private key " + crt),
                         ({"GRPC_SERVER_TLS_CERT": d + "/none.pem", "GRPC_SERVER_TLS_KEY": key},
                          "TLS: cannot load the certificate chain " + d + "/none.pem")):
            root = tempfile.mkdtemp(prefix="rls-rt-")
            os.makedirs(os.path.join(root, "ratelimit", "config"))
            r = subprocess.run([BIN], env=dict(os.environ, RUNTIME_ROOT=root, GRPC_PORT="0", PORT="0",
                                               GRPC_SERVER_USE_TLS="true", **env),
                               capture_output=True, text=True, timeout=30)
            shutil.rmtree(root, ignore_errors=True)
            self.assertEqual(r.returncode, 2, env)
            self.assertIn(msg, r.stderr)
        shutil.rmtree(d, ignore_errors=True)


@unittest.skipUnless(shutil.which("openssl"), "openssl (the command) makes the test's certificate")
class TlsAttackTest(unittest.TestCase):
    def test_tls_attacks(self):
        """GRPC_SERVER_USE_TLS, as an attacker: a truncated ClientHello and
        100 connections that never finish (or never start) a handshake stay
        open no longer than the idle bound (2 s here, checked each second);
        garbage instead of a ClientHello is closed at once; meanwhile a TLS
        client's calls and the cleartext HTTP port are served."""
        import ssl
        d = tempfile.mkdtemp(prefix="rls-tls-")
        crt, key = os.path.join(d, "c.pem"), os.path.join(d, "k.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                        "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                        "-keyout", key, "-out", crt], check=True, capture_output=True, timeout=60)
        s = Server(GRPC_SERVER_USE_TLS="true", GRPC_SERVER_TLS_CERT=crt, GRPC_SERVER_TLS_KEY=key,
                   SLUICE_RLS_IDLE_SECONDS=2)
        socks = []
        try:
            # A real ClientHello, made by python's ssl in memory.
            ctx = ssl.create_default_context()
            ctx.set_alpn_protocols(["h2"])
            inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
            obj = ctx.wrap_bio(inc, out, server_hostname="localhost")
            with self.assertRaises(ssl.SSLWantReadError):
                obj.do_handshake()
            hello = out.read()
            self.assertGreater(len(hello), 40)

            def closed_within(so, limit_s):
                """Does the server close `so` (EOF or reset) within limit_s?"""
                so.settimeout(0.2)
                t0 = time.monotonic()
                while time.monotonic() - t0 < limit_s:
                    try:
                        if so.recv(4096) == b"":
                            return True
                    except socket.timeout:
                        continue
                    except OSError:
                        return True
                return False

            # Garbage instead of a ClientHello: closed at once (an alert, then EOF).
            for junk in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", bytes(range(256)) * 4,
                         b"\x16\x03\x01\xff\xff" + b"\0" * 64):
                with socket.create_connection(("127.0.0.1", s.port), timeout=10) as so:
                    so.sendall(junk)
                    self.assertTrue(closed_within(so, 10), junk[:10])
            # The flood: 50 truncated ClientHellos, 50 silent connections.
            for i in range(100):
                so = socket.create_connection(("127.0.0.1", s.port), timeout=10)
                if i % 2 == 0:
                    so.sendall(hello[:len(hello) // 2])
                socks.append(so)
            t_flood = time.monotonic()
            # Served meanwhile: a finished TLS client, the HTTP port.
            with open(crt, "rb") as f:
                creds = grpc.ssl_channel_credentials(root_certificates=f.read())
            ch = grpc.secure_channel("127.0.0.1:%d" % s.port, creds,
                                     options=[("grpc.ssl_target_name_override", "localhost")])
            call = ch.unary_unary(RLS, request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
                                  response_deserializer=rls_pb2.RateLimitResponse.FromString)
            got = [call(request(desc(("two", "flood"))), timeout=10).overall_code for _ in range(3)]
            self.assertEqual(got, [OK, OK, OVER])
            with urllib.request.urlopen("http://127.0.0.1:%d/healthcheck" % s.http_port, timeout=10) as h:
                self.assertEqual(h.status, 200)
            # The stalled ones go within the idle bound (2 s, checked each
            # second; 30 s allows for a loaded machine).
            for so in socks:
                self.assertTrue(closed_within(so, max(1.0, 30 - (time.monotonic() - t_flood))),
                                "a stalled handshake outlived the idle bound")
            self.assertEqual(call(request(desc(("five", "flood"))), timeout=10).overall_code, OK)
            ch.close()
        finally:
            for so in socks:
                so.close()
            self.assertEqual(s.stop(), 0)
            shutil.rmtree(d, ignore_errors=True)


class Certs:
    """A test PKI made with the openssl command in a temp dir: CAs, and
    certificates they sign (EC P-256: quick to make on a loaded machine)."""

    def __init__(self):
        self.d = tempfile.mkdtemp(prefix="rls-pki-")
        os.makedirs(os.path.join(self.d, "db"))
        open(os.path.join(self.d, "db", "index.txt"), "w").close()
        with open(os.path.join(self.d, "db", "serial"), "w") as f:
            f.write("10\n")
        with open(os.path.join(self.d, "ca.cnf"), "w") as f:  # `openssl ca`, for dates in the past
            f.write("[ca]\ndefault_ca = c\n[c]\ndatabase = db/index.txt\nnew_certs_dir = db\nserial = db/serial\n"
                    "default_md = sha256\npolicy = p\nunique_subject = no\ncopy_extensions = none\n"
                    "[p]\ncommonName = supplied\n")

    def path(self, name):
        return os.path.join(self.d, name)

    def run(self, *args):
        subprocess.run(["openssl"] + list(args), check=True, capture_output=True, timeout=60, cwd=self.d)

    def ca(self, name):
        """A self-signed CA (the req defaults: basicConstraints CA:TRUE)."""
        self.run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
                 "-subj", "/CN=" + name, "-keyout", name + ".key", "-out", name + ".pem")
        return self.path(name + ".pem")

    def leaf(self, name, ca, san, eku="clientAuth", dates=None):
        """A certificate signed by `ca` with subjectAltName `san`; dates:
        (start, end) as YYYYMMDDHHMMSSZ, else valid for 2 days from now.
        Returns (certificate, key) paths."""
        self.run("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-subj", "/CN=" + name, "-keyout", name + ".key", "-out", name + ".csr")
        with open(self.path(name + ".ext"), "w") as f:
            f.write("basicConstraints=CA:FALSE\nsubjectAltName=%s\nextendedKeyUsage=%s\n" % (san, eku))
        when = ["-startdate", dates[0], "-enddate", dates[1]] if dates else ["-days", "2"]
        self.run("ca", "-batch", "-config", "ca.cnf", "-cert", ca + ".pem", "-keyfile", ca + ".key", "-notext",
                 "-in", name + ".csr", "-out", name + ".pem", "-extfile", name + ".ext", *when)
        return self.path(name + ".pem"), self.path(name + ".key")

    def server(self):
        """The server's own certificate: self-signed, for localhost."""
        self.run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
                 "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                 "-keyout", "srv.key", "-out", "srv.pem")
        return self.path("srv.pem"), self.path("srv.key")


@unittest.skipUnless(shutil.which("openssl"), "openssl (the command) makes the test's certificates")
class MtlsTest(unittest.TestCase):
    def tls_channel(self, s, srv_crt, client=None):
        """A grpcio channel to s over TLS, with client = (cert, key) or none."""
        def read(p):
            with open(p, "rb") as f:
                return f.read()
        creds = grpc.ssl_channel_credentials(root_certificates=read(srv_crt),
                                             private_key=read(client[1]) if client else None,
                                             certificate_chain=read(client[0]) if client else None)
        ch = grpc.secure_channel("127.0.0.1:%d" % s.port, creds,
                                 options=[("grpc.ssl_target_name_override", "localhost")])
        return ch, ch.unary_unary(RLS, request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
                                  response_deserializer=rls_pb2.RateLimitResponse.FromString)

    def handshake12(self, s, srv_crt, client=None):
        """A TLS 1.2 handshake from python's ssl (where the server's verdict
        on the client is part of the handshake): the ALPN protocol chosen,
        or the SSLError."""
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(srv_crt)
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(["h2"])
        if client:
            ctx.load_cert_chain(client[0], client[1])
        with socket.create_connection(("127.0.0.1", s.port), timeout=10) as so:
            try:
                with ctx.wrap_socket(so, server_hostname="localhost") as t:
                    return t.selected_alpn_protocol()
            except ssl.SSLError as e:
                return e

    def test_client_certificates(self):
        """GRPC_CLIENT_TLS_CACERT and GRPC_CLIENT_TLS_SAN (envoyproxy/
        ratelimit's mTLS): a client certificate from the CA with the SAN is
        served; no certificate, one from another CA, an expired one, one with
        another SAN, one for servers only (extendedKeyUsage serverAuth) are
        refused in the handshake (a TLS 1.2 handshake fails with the alert
        that names the reason; grpcio's calls fail) and spend nothing, while
        the server goes on serving the good client, on its one worker."""
        pki = Certs()
        try:
            srv = pki.server()
            ca1, ca2 = pki.ca("ca1"), pki.ca("ca2")
            good = pki.leaf("good", "ca1", "DNS:client.example")
            other_ca = pki.leaf("other", "ca2", "DNS:client.example")
            expired = pki.leaf("expired", "ca1", "DNS:client.example", dates=("20200101000000Z", "20200102000000Z"))
            wrong_san = pki.leaf("wrongsan", "ca1", "DNS:other.example,IP:127.0.0.1")
            server_only = pki.leaf("serveronly", "ca1", "DNS:client.example", eku="serverAuth")
            s = Server(GRPC_SERVER_USE_TLS="true", GRPC_SERVER_TLS_CERT=srv[0], GRPC_SERVER_TLS_KEY=srv[1],
                       GRPC_CLIENT_TLS_CACERT=ca1, GRPC_CLIENT_TLS_SAN="client.example", SLUICE_RLS_WORKERS=1)
            try:
                self.assertEqual(self.handshake12(s, srv[0], good), "h2")
                ch, call = self.tls_channel(s, srv[0], good)
                self.assertEqual(call(request(desc(("two", "m"))), timeout=10).overall_code, OK)
                refused = {"no certificate": (None, "HANDSHAKE_FAILURE"), "another CA": (other_ca, "UNKNOWN_CA"),
                           "expired": (expired, "CERTIFICATE_EXPIRED"), "another SAN": (wrong_san, None),
                           "serverAuth only": (server_only, "UNSUPPORTED_CERTIFICATE")}
                for what, (cert, alert) in refused.items():
                    e = self.handshake12(s, srv[0], cert)
                    self.assertIsInstance(e, Exception, what)
                    if alert:
                        self.assertIn(alert, str(e), what)
                    bad_ch, bad_call = self.tls_channel(s, srv[0], cert)  # TLS 1.3, grpcio
                    with self.assertRaises(grpc.RpcError, msg=what) as cm:
                        bad_call(request(desc(("two", "m"))), timeout=10)
                    self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, what)
                    bad_ch.close()
                    # the good client is still served (one worker: the same
                    # thread that refused the handshake)
                    self.assertEqual(call(request(desc(("five", "m"))), timeout=10).overall_code, OK, what)
                # the refused calls spent nothing: the second of two is the last
                self.assertEqual([call(request(desc(("two", "m"))), timeout=10).overall_code for _ in range(2)],
                                 [OK, OVER])
                ch.close()
            finally:
                self.assertEqual(s.stop(), 0)
            # Without a SAN any certificate from the CA is served; another
            # CA's is still refused.
            s = Server(GRPC_SERVER_USE_TLS="true", GRPC_SERVER_TLS_CERT=srv[0], GRPC_SERVER_TLS_KEY=srv[1],
                       GRPC_CLIENT_TLS_CACERT=ca1)
            try:
                ch, call = self.tls_channel(s, srv[0], wrong_san)
                self.assertEqual(call(request(desc(("two", "m"))), timeout=10).overall_code, OK)
                ch.close()
                self.assertIsInstance(self.handshake12(s, srv[0], other_ca), Exception)
            finally:
                self.assertEqual(s.stop(), 0)
            # The name as Go's VerifyHostname matches it: an IP address
            # (bare or in [ ]) against the IP SANs only; a DNS name
            # case-insensitively, `*` as one whole left-most label; never
            # the CN.
            wild = pki.leaf("wild", "ca1", "DNS:*.Clients.Example")
            cn_only = pki.leaf("client.example", "ca1", "DNS:x.example")  # CN=client.example
            ip_in_dns = pki.leaf("ipdns", "ca1", "DNS:127.0.0.1")
            for san, served, refused in (("127.0.0.1", [wrong_san], [good, ip_in_dns]),
                                         ("[127.0.0.1]", [wrong_san], [good]),
                                         ("CLIENT.example", [good], [wrong_san, cn_only]),
                                         ("a.clients.example", [wild], [good]),
                                         ("b.a.clients.example", [], [wild])):
                s = Server(GRPC_SERVER_USE_TLS="true", GRPC_SERVER_TLS_CERT=srv[0], GRPC_SERVER_TLS_KEY=srv[1],
                           GRPC_CLIENT_TLS_CACERT=ca1, GRPC_CLIENT_TLS_SAN=san)
                try:
                    for c in served:
                        self.assertEqual(self.handshake12(s, srv[0], c), "h2", (san, c))
                    for c in refused:
                        self.assertIsInstance(self.handshake12(s, srv[0], c), Exception, (san, c))
                finally:
                    self.assertEqual(s.stop(), 0)
        finally:
            shutil.rmtree(pki.d, ignore_errors=True)

    def test_bad_client_tls_config(self):
        """Refused at start (exit 2) with a line that names the variable or
        the file and OpenSSL's reason."""
        pki = Certs()
        try:
            crt, key = pki.server()
            ca1 = pki.ca("ca1")
            tls = {"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": crt, "GRPC_SERVER_TLS_KEY": key}
            junk = pki.path("junk.pem")
            with open(junk, "w") as f:
                f.write("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
            empty = pki.path("empty.pem")
            open(empty, "w").close()
            cases = [({"GRPC_CLIENT_TLS_CACERT": ca1},
                      "GRPC_CLIENT_TLS_CACERT is set but GRPC_SERVER_USE_TLS is not true"),
                     ({"GRPC_CLIENT_TLS_SAN": "client.example"},
                      "GRPC_CLIENT_TLS_SAN is set but GRPC_SERVER_USE_TLS is not true"),
                     (dict(tls, GRPC_CLIENT_TLS_SAN="client.example"),
                      "GRPC_CLIENT_TLS_SAN='client.example' needs GRPC_CLIENT_TLS_CACERT"),
                     (dict(tls, GRPC_CLIENT_TLS_CACERT=pki.path("none.pem")),
                      "TLS: cannot load the client CA certificates " + pki.path("none.pem") + " (error:"),
                     (dict(tls, GRPC_CLIENT_TLS_CACERT=junk),
                      "TLS: cannot load the client CA certificates " + junk + " (error:"),
                     (dict(tls, GRPC_CLIENT_TLS_CACERT=empty),
                      "TLS: cannot load the client CA certificates " + empty + " (error:"),
                     (dict(tls, GRPC_CLIENT_TLS_CACERT=pki.path("ca1.key")),
                      "TLS: cannot load the client CA certificates " + pki.path("ca1.key") + " (error:")]
            root = tempfile.mkdtemp(prefix="rls-rt-")
            os.makedirs(os.path.join(root, "ratelimit", "config"))
            try:
                for env, msg in cases:
                    r = subprocess.run([BIN], env=dict(os.environ, RUNTIME_ROOT=root, GRPC_PORT="0", PORT="0", **env),
                                       capture_output=True, text=True, timeout=30)
                    self.assertEqual(r.returncode, 2, env)
                    self.assertIn(msg, r.stderr, env)
                    self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            finally:
                shutil.rmtree(root, ignore_errors=True)
        finally:
            shutil.rmtree(pki.d, ignore_errors=True)


def free_port():
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


class RedisServer:
    """redis-server on 127.0.0.1 (no persistence), stopped by stop()."""

    def __init__(self, port=None):
        self.dir = tempfile.mkdtemp(prefix="rls-redis-")
        self.port = port or free_port()
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--save", "", "--appendonly", "no", "--dir", self.dir],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 20:
            if self.proc.poll() is not None:
                raise RuntimeError("redis-server exited with %r" % self.proc.returncode)
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("redis-server did not answer PING in 20 s")

    def cli(self, *args):
        return subprocess.run(["redis-cli", "-p", str(self.port)] + list(args), capture_output=True, text=True,
                              timeout=30).stdout

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def hammer(servers, value, n, procs=4):
    """`procs` client processes (spread over `servers`), n calls each on
    descriptor (shared, value); returns the OK answers they counted."""
    ps = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--hammer", str(servers[i % len(servers)].port),
                            value, str(n), GEN], stdout=subprocess.PIPE, text=True) for i in range(procs)]
    total = 0
    for p in ps:
        out, _ = p.communicate(timeout=300)  # a failed call's traceback is on stderr
        assert p.returncode == 0, "a client process failed"
        total += int(out.split()[0])
    return total


# Redis calls' deadline in the tests that expect Redis to answer: the
# default (50 ms) is for production; a loaded CI machine can exceed it.
SLOW_OK = {"SLUICE_RLS_REDIS_TIMEOUT_MS": 5000}

REDIS_CONFIG = """
domain: test
descriptors:
  - key: two
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: five
    rate_limit: {unit: day, requests_per_unit: 5}
  - key: tb
    rate_limit: {unit: day, requests_per_unit: 3, algorithm: token-bucket}
  - key: shared
    rate_limit: {unit: year, requests_per_unit: 500}
"""


@unittest.skipUnless(os.environ.get("SLUICE_RLS_TEST_REDIS") == "1" and shutil.which("redis-server"),
                     "the Redis backend's tests run as ctest rls_redis (redis-server needed)")
class RedisTest(unittest.TestCase):
    """REDIS_URL: every limit in Redis, shared by sluice-rls processes."""

    def test_two_servers_one_redis(self):
        """Two sluice-rls processes on one redis-server, 2 client processes
        on each, 250 calls each, one limit of 500 a year: exactly 500
        admitted (one round trip per decision: Redis's order decides)."""
        r = RedisServer()
        servers = []
        try:
            for _ in range(2):
                servers.append(Server(config=REDIS_CONFIG, REDIS_URL="127.0.0.1:%d" % r.port, **SLOW_OK))
            self.assertEqual(hammer(servers, "exact", 250), 500)
            # /metrics: one round trip per call (500 calls on each server)
            # no error, no fallback; promtool accepts the families.
            for sv in servers[:2]:
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % sv.http_port, timeout=10) as h:
                    text = h.read().decode()
                m = {l.split()[0]: float(l.split()[1]) for l in text.splitlines() if l and l[0] != "#"}
                # (and the EVAL that answers a first NOSCRIPT)
                self.assertIn(m["sluice_rls_redis_round_trips_total"], (500, 501))
                self.assertEqual(m["sluice_rls_redis_errors_total"], 0)
                self.assertEqual(m["sluice_rls_redis_fallbacks_total"], 0)
                if shutil.which("promtool"):
                    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                                       timeout=30)
                    self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertEqual(r.cli("DBSIZE").strip(), "1")  # one key: PREFIX rls:DIGEST:{KEY}:SPECID
            self.assertTrue(r.cli("--scan").startswith("rls:"))
            # A limit's counter is in Redis: a third server, started now,
            # sees it spent.
            servers.append(Server(config=REDIS_CONFIG, REDIS_URL="redis://127.0.0.1:%d" % r.port, **SLOW_OK))
            got = servers[2].call(request(desc(("shared", "exact"))), timeout=10)
            self.assertEqual(got.overall_code, OVER)
        finally:
            for sv in servers:
                self.assertEqual(sv.stop(), 0)
            r.stop()

    def test_leases_bound(self):
        """SLUICE_RLS_REDIS_LEASE_MAX: two servers take leases; the processes
        together stay within P * lease_cap of the limit (the Redis tier's
        bound; lease_cap = 500 / (100 * 2) = 2 here), above and below."""
        r = RedisServer()
        servers = []
        try:
            for _ in range(2):
                servers.append(Server(config=REDIS_CONFIG, REDIS_URL="127.0.0.1:%d" % r.port,
                                      SLUICE_RLS_REDIS_LEASE_MAX=100, SLUICE_RLS_REDIS_PROCESSES=2, **SLOW_OK))
            got = hammer(servers, "lease", 250)
            self.assertLessEqual(got, 504)
            self.assertGreaterEqual(got, 496)
        finally:
            for sv in servers:
                self.assertEqual(sv.stop(), 0)
            r.stop()

    def test_descriptors_all_or_nothing(self):
        """On Redis (no leases) the enforced descriptors of a call are one
        composite, decided by one script: a request refused by one limit
        charges no other, before or after it (envoyproxy/ratelimit#1060);
        each says its own verdict, and one that would have allowed keeps its
        remaining (docs/rls.md, "Redis")."""
        r = RedisServer()
        s = Server(config=REDIS_CONFIG, REDIS_URL="127.0.0.1:%d" % r.port, **SLOW_OK)
        try:
            for _ in range(2):
                self.assertEqual(s.call(request(desc(("two", "o"))), timeout=10).overall_code, OK)
            got = s.call(request(desc(("two", "o")), desc(("five", "o"))), timeout=10)
            self.assertEqual([x.code for x in got.statuses], [OVER, OK])
            self.assertEqual(got.statuses[1].limit_remaining, 5)  # nothing spent
            # The second refuses: the first is not charged either.
            got = s.call(request(desc(("five", "o")), desc(("two", "o"))), timeout=10)
            self.assertEqual(got.overall_code, OVER)
            self.assertEqual([x.code for x in got.statuses], [OK, OVER])
            self.assertEqual(got.statuses[0].limit_remaining, 5)
            probe = s.call(request(desc(("five", "o"), hits=0)), timeout=10)
            self.assertEqual(probe.statuses[0].limit_remaining, 5)  # read back: unchanged
            # One round trip for the two (and the EVAL after the first NOSCRIPT).
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % s.http_port, timeout=10) as h:
                m = {l.split()[0]: float(l.split()[1]) for l in h.read().decode().splitlines() if l and l[0] != "#"}
            self.assertEqual(m["sluice_rls_redis_round_trips_total"], 2 + 1 + 1 + 1 + 2)
            # hits_addend per descriptor: each limit charged its own, both.
            got = s.call(request(desc(("five", "h"), hits=3), desc(("tb", "h"), hits=2)), timeout=10)
            self.assertEqual(got.overall_code, OK)
            self.assertEqual([x.limit_remaining for x in got.statuses], [2, 1])
            # token-bucket in Redis: 3 a day, so 1 left: refused, and five
            # keeps its 2.
            got = s.call(request(desc(("five", "h"), hits=1), desc(("tb", "h"), hits=2)), timeout=10)
            self.assertEqual(got.overall_code, OVER)
            self.assertEqual(s.call(request(desc(("five", "h"), hits=0)), timeout=10).statuses[0].limit_remaining, 2)
            # One key twice in a call: charged once, the larger hits.
            got = s.call(request(desc(("five", "d"), hits=1), desc(("five", "d"), hits=2)), timeout=10)
            self.assertEqual(got.overall_code, OK)
            self.assertEqual(s.call(request(desc(("five", "d"), hits=0)), timeout=10).statuses[0].limit_remaining, 3)
        finally:
            self.assertEqual(s.stop(), 0)
            r.stop()

    def test_descriptors_all_or_nothing_with_leases(self):
        """With leases (SLUICE_RLS_REDIS_LEASE_MAX > 0) too the descriptors
        are one composite (docs/rls.md, "Several descriptors"): a call
        refused by the second charges the first nowhere, neither in the
        process's lease nor in Redis (its key is never written), and the
        first keeps its whole limit."""
        r = RedisServer()
        s = Server(config=REDIS_CONFIG, REDIS_URL="127.0.0.1:%d" % r.port, SLUICE_RLS_REDIS_LEASE_MAX=1, **SLOW_OK)
        try:
            for _ in range(2):
                self.assertEqual(s.call(request(desc(("two", "o"))), timeout=10).overall_code, OK)
            self.assertEqual(r.cli("DBSIZE").strip(), "1")  # two's key
            for order in ((("five", "o"), ("two", "o")), (("two", "o"), ("five", "o"))):
                got = s.call(request(desc(order[0]), desc(order[1])), timeout=10)
                self.assertEqual(got.overall_code, OVER)
                five = 0 if order[0][0] == "five" else 1
                self.assertEqual(got.statuses[five].code, OK)  # would have allowed
                self.assertEqual(got.statuses[1 - five].code, OVER)
                self.assertEqual(r.cli("DBSIZE").strip(), "1")  # five: nothing written
            # five alone: fresh, its lease fetched now (1 + a surplus of 1 of 5)
            got = s.call(request(desc(("five", "o"))), timeout=10)
            self.assertEqual(got.overall_code, OK)
            self.assertEqual(got.statuses[0].limit_remaining, 4)
            self.assertEqual(r.cli("DBSIZE").strip(), "2")
        finally:
            self.assertEqual(s.stop(), 0)
            r.stop()

    def test_default_fixed_window(self):
        """On Redis a limit without `algorithm` is fixed-window, as in
        process (envoyproxy/ratelimit's aligned window): the key holds the
        fixed-window script's fields, and a refusal waits until the end of
        the UTC day (docs/decisions.md 3.1: windows aligned to 0)."""
        r = RedisServer()
        s = Server(config=REDIS_CONFIG, REDIS_URL="127.0.0.1:%d" % r.port, **SLOW_OK)
        try:
            for left in (1, 0):
                got = s.call(request(desc(("two", "fw"))), timeout=10)
                self.assertEqual(got.overall_code, OK)
                self.assertEqual(got.statuses[0].limit_remaining, left)
            # (the key name holds binary lengths: read it inside Redis)
            self.assertEqual(r.cli("DBSIZE").strip(), "1")
            one = "local k = redis.call('KEYS', '*')[1]; return redis.call(ARGV[1], k)"
            self.assertEqual(sorted(r.cli("EVAL", one, "0", "HKEYS").split()), ["c", "k", "t"])
            got = s.call(request(desc(("two", "fw"))), timeout=10)
            now = time.time()
            self.assertEqual(got.overall_code, OVER)
            reset = got.statuses[0].duration_until_reset.seconds
            self.assertLessEqual(abs(reset - (86400 - now % 86400)), 3)
            # The key expires at the window's end (plus at most 1 ms).
            ttl = int(r.cli("EVAL", one, "0", "PTTL"))
            self.assertLessEqual(abs(ttl / 1000 - (86400 - now % 86400)), 3)
        finally:
            self.assertEqual(s.stop(), 0)
            r.stop()

    def test_redis_down(self):
        """Redis unreachable: by default UNAVAILABLE (Envoy's failure_mode_deny
        decides), /json 503, /healthcheck still 200; back when Redis is;
        SLUICE_RLS_REDIS_FAILURE=closed, open, local: the tier's policies."""
        port = free_port()
        s = Server(config=REDIS_CONFIG, REDIS_URL="127.0.0.1:%d" % port, SLUICE_RLS_REDIS_TIMEOUT_MS=200)
        r = None
        try:
            with self.assertRaises(grpc.RpcError) as e:
                s.call(request(desc(("two", "d"))), timeout=10)
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
            self.assertIn("Redis could not decide limit 'test.two'", e.exception.details())
            body = json.dumps({"domain": "test", "descriptors": [{"entries": [{"key": "two", "value": "d"}]}]})
            req = urllib.request.Request("http://127.0.0.1:%d/json" % s.http_port, data=body.encode(), method="POST")
            with self.assertRaises(urllib.error.HTTPError) as he:
                urllib.request.urlopen(req, timeout=10)
            self.assertEqual(he.exception.code, 503)
            with urllib.request.urlopen("http://127.0.0.1:%d/healthcheck" % s.http_port, timeout=10) as h:
                self.assertEqual(h.status, 200)
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % s.http_port, timeout=10) as h:
                text = h.read().decode()
            m = {l.split()[0]: float(l.split()[1]) for l in text.splitlines() if l and l[0] != "#"}
            self.assertEqual(m["sluice_rls_redis_fallbacks_total"], 2)  # the gRPC call and /json
            self.assertEqual(m["sluice_rls_redis_errors_total"], 2)
            # A descriptor no limit matches needs no Redis.
            self.assertEqual(s.call(request(desc(("none", "d"))), timeout=10).overall_code, OK)
            r = RedisServer(port)
            t0, ok = time.monotonic(), False
            while not ok and time.monotonic() - t0 < 30:  # the circuit's backoff is at most 1 s
                try:
                    ok = s.call(request(desc(("two", "d"))), timeout=10).overall_code == OK
                except grpc.RpcError:
                    time.sleep(0.05)
            self.assertTrue(ok, "Redis came back and sluice-rls did not use it within 30 s")
        finally:
            self.assertEqual(s.stop(), 0)
            if r:
                r.stop()
        for policy, want in (("closed", [OVER, OVER, OVER]), ("open", [OK, OK, OK]), ("local", [OK, OK, OVER])):
            s = Server(config=REDIS_CONFIG, REDIS_URL="127.0.0.1:%d" % port, SLUICE_RLS_REDIS_TIMEOUT_MS=200,
                       SLUICE_RLS_REDIS_FAILURE=policy)
            try:
                got = [s.call(request(desc(("two", "p"))), timeout=10).overall_code for _ in range(3)]
                self.assertEqual(got, want, policy)
            finally:
                self.assertEqual(s.stop(), 0)

    def test_descriptor_bytes(self):
        """An attacker's descriptor values on Redis: every length (0, 1, 255,
        256, 4 KiB, 64 KiB, past the descriptor bound) and every byte (each
        of 0x00..0xff alone, NUL inside a value, invalid UTF-8, Redis
        Cluster's hash-tag bytes '{' '}' and ':'), sent raw on the wire
        (grpcio's protobuf would refuse to encode some).  Each value on a
        limit of 1 a day is either decided (first call OK, second
        OVER_LIMIT: its own fresh counter, so no two values share one) or
        refused with INVALID_ARGUMENT and a message naming the descriptor;
        the server never dies, and Redis holds one key per decided value."""
        r = RedisServer()
        s = Server(config=REDIS_CONFIG, REDIS_URL="127.0.0.1:%d" % r.port, SLUICE_RLS_MAX_MSG_BYTES=200000,
                   **SLOW_OK)
        try:
            raw = s.channel.unary_unary(RLS, request_serializer=lambda b: b,
                                        response_deserializer=rls_pb2.RateLimitResponse.FromString)
            values = [b"", b"a", b"x" * 255, b"y" * 256, b"z" * 4096, b"w" * 65000]
            values += [bytes([c]) for c in range(256) if c != ord("a")]
            values += [b"a\0b", b"a\0c", b"\0\0", b"\xc3\x28", b"\xff\xfe", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                       b"{}", b"{a}", b"a}b{", b"}{", b"x:{y}", b":{", b"}:", b"{" * 300, "é".encode()]
            decided, refused = 0, []
            for v in values:
                msg = raw_request(b"test", [[(b"two", v)]])
                try:
                    got = [raw(msg, timeout=30) for _ in range(3)]
                except grpc.RpcError as e:
                    self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, (v[:20], e.details()))
                    self.assertRegex(e.details(), "descriptor 0", v[:20])
                    refused.append((v[:20], e.details()))
                    continue
                codes = [(g.overall_code, g.statuses[0].limit_remaining) for g in got]
                self.assertEqual(codes, [(OK, 1), (OK, 0), (OVER, 0)], "value %r shares a counter" % v[:40])
                decided += 1
            # Past the descriptor bound (64 KiB): refused, named.
            with self.assertRaises(grpc.RpcError) as e:
                raw(raw_request(b"test", [[(b"two", b"v" * 70000)]]), timeout=30)
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("descriptor 0 is 70011 bytes long; at most 65536", e.exception.details())
            # Past the message bound: RESOURCE_EXHAUSTED, nothing read.
            with self.assertRaises(grpc.RpcError) as e:
                raw(raw_request(b"test", [[(b"two", b"v" * 200001)]]), timeout=30)
            self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertEqual(int(r.cli("DBSIZE")), decided)
            # Only the values with a NUL byte are refused (protobuf-c would
            # cut them at the NUL: "a\0b" and "a" would share a counter).
            self.assertEqual(sorted(v for v, _ in refused), sorted(v[:20] for v in values if b"\0" in v), refused)
            self.assertEqual(s.call(request(desc(("five", "after"))), timeout=10).overall_code, OK)
        finally:
            self.assertEqual(s.stop(), 0)
            r.stop()

    def test_reload_under_load_redis(self):
        """REDIS_URL: 4 client processes x 600 calls on one limit of 2000
        while the config is reloaded 5 times: no call fails, no client sees
        an OK after an OVER_LIMIT (a reload never refuses what the limit
        allows), exactly 2000 are admitted (no over-admission across the
        swap)."""
        config = REDIS_CONFIG.replace("requests_per_unit: 500", "requests_per_unit: 2000")
        r = RedisServer()
        s = Server(config=config, REDIS_URL="127.0.0.1:%d" % r.port, SLUICE_RLS_RELOAD_MS=10, **SLOW_OK)
        try:
            procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--hammer", str(s.port),
                                       "reload", "600", GEN], stdout=subprocess.PIPE, text=True)
                     for _ in range(4)]
            probe = request(desc(("shared", "reload"), hits=0))
            for i in range(5):
                t0 = time.monotonic()
                while s.call(probe, timeout=10).statuses[0].limit_remaining > 1950 - 100 * i:
                    self.assertLess(time.monotonic() - t0, 120, "the clients make no progress")
                    time.sleep(0.005)
                s.write_config(config + "# change %d\n" % i)
                s.wait_stderr("reloaded:", count=i + 1)
            self.assertGreater(s.call(probe, timeout=10).statuses[0].limit_remaining, 0,
                               "the reloads came after the limit was reached: they proved nothing")
            total = 0
            for p in procs:
                out, _ = p.communicate(timeout=300)
                self.assertEqual(p.returncode, 0, "a call failed during a reload")
                total += int(out.split()[0])
                self.assertEqual(int(out.split()[3]), 0, "a call was refused while the limit allowed it")
            self.assertEqual(total, 2000)
        finally:
            self.assertEqual(s.stop(), 0)
            r.stop()

    def test_answers_survive_reloads(self):
        """4 client threads on a refusing limit in Redis while the config is
        reloaded 150 times, the limit's name changing each time: every
        answer decodes and names the limit as one of the configs did.
        Before the fix a worker let go of the config before packing the
        answer, and a reload freed the name under it (about one answer in
        20,000 came with freed bytes as its name; the test saw it in about
        one run of three, and under ASan it is a use after free)."""
        import threading
        cfg = ("domain: test\ndescriptors:\n  - key: shared\n    rate_limit: {unit: year, requests_per_unit: 5, "
               "name: %s}\n")
        names = ["limit-name-%03d-%s" % (i, "x" * 40) for i in range(151)]
        r = RedisServer()
        s = Server(config=cfg % names[0], REDIS_URL="127.0.0.1:%d" % r.port, SLUICE_RLS_RELOAD_MS=10, **SLOW_OK)
        bad, calls, stop = [], [0], [False]

        def client():
            ch = grpc.insecure_channel("127.0.0.1:%d" % s.port)
            call = ch.unary_unary(RLS, request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
                                  response_deserializer=lambda b: b)
            req = request(desc(("shared", "reloads")))
            t0 = time.monotonic()
            while not stop[0] and time.monotonic() - t0 < 300 and calls[0] < 10 ** 6:
                raw = call(req, timeout=30)
                calls[0] += 1
                try:
                    name = rls_pb2.RateLimitResponse.FromString(raw).statuses[0].current_limit.name
                    if name not in names:
                        bad.append(raw)
                except Exception:  # noqa: BLE001 (a decode error is the finding)
                    bad.append(raw)
            ch.close()
        th = [threading.Thread(target=client) for _ in range(4)]
        try:
            for t in th:
                t.start()
            for i in range(1, 151):
                s.write_config(cfg % names[i])
                s.wait_stderr("reloaded:", count=i)
            stop[0] = True
            for t in th:
                t.join(timeout=60)
            self.assertGreater(calls[0], 150, "too few calls to mean anything")
            self.assertEqual(bad[:1], [], "%d of %d answers do not decode or name no config's limit" %
                             (len(bad), calls[0]))
        finally:
            stop[0] = True
            for t in th:
                if t.is_alive():
                    t.join(timeout=60)
            self.assertEqual(s.stop(), 0)
            r.stop()

    def test_kill_mid_run(self):
        """SIGKILL a sluice-rls under load (4 client threads on one limit of
        500 in Redis) and start another on the same Redis: the count
        survives in Redis, so the clients together see at most 500 admitted
        and at most the calls the kill cut off (one per thread) fewer: a
        call in flight may have been charged and never answered."""
        import threading
        r = RedisServer()
        cur = [Server(config=REDIS_CONFIG, REDIS_URL="127.0.0.1:%d" % r.port, **SLOW_OK)]
        ok, failed, lock, stop = [0], [0], threading.Lock(), [False]
        req = request(desc(("shared", "kill")))

        def client():
            t0 = time.monotonic()
            for _ in range(5000):  # bounded in count and time; until the limit refuses
                if stop[0] or time.monotonic() - t0 > 180:
                    return
                try:
                    got = cur[0].call(req, timeout=10).overall_code == OK
                    with lock:
                        ok[0] += got
                    if not got:
                        return
                except grpc.RpcError:  # the killed server, or the new one not up yet
                    with lock:
                        failed[0] += 1
                    time.sleep(0.02)
        th = [threading.Thread(target=client) for _ in range(4)]
        try:
            for t in th:
                t.start()
            t0 = time.monotonic()
            while ok[0] < 150:
                self.assertLess(time.monotonic() - t0, 120, "the clients make no progress")
                time.sleep(0.005)
            old = cur[0]
            old.proc.kill()  # SIGKILL: no drain, no goodbye
            self.assertEqual(old.proc.wait(timeout=20), -signal.SIGKILL)
            cur[0] = Server(config=REDIS_CONFIG, REDIS_URL="127.0.0.1:%d" % r.port, **SLOW_OK)
            for t in th:
                t.join(timeout=300)
            old.channel.close()  # (a thread may still have held it)
            old.proc.stdout.close()
            old.err.close()
            shutil.rmtree(old.root, ignore_errors=True)
            self.assertFalse(any(t.is_alive() for t in th))
            # At most one call per client thread was in flight at the kill.
            self.assertLessEqual(ok[0], 500)
            self.assertGreaterEqual(ok[0], 500 - len(th), (ok[0], failed[0]))
            got = cur[0].call(request(desc(("shared", "kill"), hits=0)), timeout=10)
            self.assertEqual(got.statuses[0].limit_remaining, 0)
        finally:
            stop[0] = True
            for t in th:
                if t.is_alive():
                    t.join(timeout=60)
            self.assertEqual(cur[0].stop(), 0)
            r.stop()

    def test_kill_mid_run_with_leases(self):
        """SLUICE_RLS_REDIS_LEASE_MAX > 0: three sluice-rls processes take
        leases on one limit of 3000 a year in Redis (P = 3, so lease_cap =
        min(1000, 3000 / (100 * 3)) = 10; lease_ttl 100 ms), two client
        threads on each; SIGKILL one under load and start another in its
        place.  Counted by the clients:

        - never over: admitted <= 3000.  Every permit a client gets was
          granted by Redis, and Redis grants at most the limit in the year's
          window, whoever dies;
        - the under-admission is what the processes dropped plus what the
          kill lost.  Each process counts the lease permits it drops unspent
          (expired: routine when a lease outlives its clients' pace);
          /metrics gives them for the processes alive at the end, and for
          the killed one as read just before the kill.  What remains, X =
          3000 - admitted - dropped, is what the kill took: the lease it
          held (<= lease_cap), a lease that expired between that read and
          the kill (<= lease_cap for each lease_ttl of that window, plus
          one), and the calls in flight, charged and never answered (<= one
          per client thread of the killed server).  So 0 <= X <= lease_cap
          * (2 + window / lease_ttl) + 2, and Redis is left dry (a fresh
          exact server probes 0 remaining): nothing else was lost."""
        import threading
        L, cap, ttl_s, per = 3000, 10, 0.1, 2
        config = REDIS_CONFIG + "  - key: big\n    rate_limit: {unit: year, requests_per_unit: %d}\n" % L
        r = RedisServer()
        env = dict(config=config, REDIS_URL="127.0.0.1:%d" % r.port, SLUICE_RLS_REDIS_LEASE_MAX=1000,
                   SLUICE_RLS_REDIS_PROCESSES=3, **SLOW_OK)
        cur, old = [], None
        ok, failed, lock, stop = [0], [0], threading.Lock(), [False]
        req = request(desc(("big", "kill")))

        def client(slot):
            t0, refused_since = time.monotonic(), None
            for _ in range(50000):  # bounded in count and time
                if stop[0] or time.monotonic() - t0 > 240:
                    return
                try:
                    got = cur[slot].call(req, timeout=10).overall_code == OK
                except grpc.RpcError:  # the killed server, or its successor not up yet
                    with lock:
                        failed[0] += 1
                    time.sleep(0.02)
                    continue
                now = time.monotonic()
                if got:
                    with lock:
                        ok[0] += 1
                    refused_since = None
                elif refused_since is None:
                    refused_since = now
                elif now - refused_since > 2.0:
                    # refused for 20 lease lifetimes: this server holds no
                    # lease (any it had was spent by these calls, or expired
                    # and was dropped at one of them) and Redis is dry
                    return

        def dropped(sv):
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % sv.http_port, timeout=10) as h:
                text = h.read().decode()
            m = {l.split()[0]: float(l.split()[1]) for l in text.splitlines() if l and l[0] != "#"}
            return int(m["sluice_rls_redis_lease_dropped_total"]), int(m["sluice_rls_redis_lease_permits_total"])

        th = []
        try:
            for _ in range(3):
                cur.append(Server(**env))
            th = [threading.Thread(target=client, args=(i // per,)) for i in range(3 * per)]
            for t in th:
                t.start()
            t0 = time.monotonic()
            while ok[0] < L // 3:
                self.assertLess(time.monotonic() - t0, 120, "the clients make no progress")
                time.sleep(0.005)
            old = cur[0]
            w0 = time.monotonic()
            dropped_old, leased_old = dropped(old)
            old.proc.kill()  # SIGKILL: no drain, no goodbye
            window = time.monotonic() - w0
            self.assertEqual(old.proc.wait(timeout=20), -signal.SIGKILL)
            self.assertGreater(leased_old, 0, "the killed server held no lease: nothing tested")
            cur[0] = Server(**env)
            for t in th:
                t.join(timeout=300)
            self.assertFalse(any(t.is_alive() for t in th))
            drops = [dropped(sv)[0] for sv in cur]
            admitted = ok[0]
            self.assertLessEqual(admitted, L, "over-admitted")
            x = L - admitted - dropped_old - sum(drops)
            bound = cap * (2 + int(window / ttl_s)) + per
            detail = "admitted %d, dropped %d before the kill + %r after, the kill took %d (bound %d, window %.3f s)" % (
                admitted, dropped_old, drops, x, bound, window)
            self.assertGreaterEqual(x, 0, detail)
            self.assertLessEqual(x, bound, detail)
            # Redis is dry: an exact server (one round trip) sees 0 left.
            exact = Server(**dict(env, SLUICE_RLS_REDIS_LEASE_MAX=0))
            cur.append(exact)
            got = exact.call(request(desc(("big", "kill"), hits=0)), timeout=10)
            self.assertEqual(got.statuses[0].limit_remaining, 0, detail)
            self.assertEqual(exact.call(req, timeout=10).overall_code, OVER)
            print("test_kill_mid_run_with_leases:", detail, file=sys.stderr)
        finally:
            stop[0] = True
            for t in th:
                if t.is_alive():
                    t.join(timeout=60)
            if old:
                old.channel.close()
                old.proc.stdout.close()
                old.err.close()
                shutil.rmtree(old.root, ignore_errors=True)
            for sv in cur:
                if sv is not old:
                    self.assertEqual(sv.stop(), 0)
            r.stop()

    def test_redis_killed_under_the_server(self):
        """SIGKILL redis-server while sluice-rls serves: each call is still
        answered, within the deadline, as docs/rls.md says (default
        `error`: UNAVAILABLE; `open`: OK); /healthcheck stays 200; a
        redis-server started again on the same port is used within the
        circuit's backoff (counts start afresh: that Redis kept none)."""
        for policy, down in (("error", "UNAVAILABLE"), ("open", OK)):
            r = RedisServer()
            s = Server(config=REDIS_CONFIG, REDIS_URL="127.0.0.1:%d" % r.port, SLUICE_RLS_REDIS_TIMEOUT_MS=300,
                       SLUICE_RLS_REDIS_FAILURE=policy)
            r2 = None
            try:
                got = [s.call(request(desc(("two", "k"))), timeout=10).overall_code for _ in range(3)]
                self.assertEqual(got, [OK, OK, OVER])
                r.proc.kill()
                r.proc.wait(timeout=20)
                for _ in range(5):
                    t0 = time.monotonic()
                    try:
                        code = s.call(request(desc(("two", "k"))), timeout=10).overall_code
                    except grpc.RpcError as e:
                        code = e.code().name
                        self.assertIn("Redis could not decide limit 'test.two'", e.details())
                    self.assertEqual(code, down, policy)
                    self.assertLess(time.monotonic() - t0, 9, "an answer waited past the Redis deadline")
                with urllib.request.urlopen("http://127.0.0.1:%d/healthcheck" % s.http_port, timeout=10) as h:
                    self.assertEqual(h.status, 200)
                r2 = RedisServer(r.port)
                t0, back = time.monotonic(), []
                while len(back) < 3 and time.monotonic() - t0 < 30:  # the backoff is at most 1 s
                    try:
                        back.append(s.call(request(desc(("two", "k2"))), timeout=10).overall_code)
                    except grpc.RpcError:
                        time.sleep(0.05)
                    if policy == "open" and back and int(r2.cli("DBSIZE") or 0) == 0:
                        back = []  # answered by the policy: Redis not used yet
                        time.sleep(0.05)
                self.assertEqual(back, [OK, OK, OVER], "Redis came back and was not used within 30 s")
            finally:
                self.assertEqual(s.stop(), 0)
                r.stop()
                if r2:
                    r2.stop()

    def test_bad_redis_settings(self):
        """Each refused at start with exit 2 and a line naming the variable
        (never a password)."""
        cases = [({"REDIS_URL": "127.0.0.1"}, "REDIS_URL='127.0.0.1' is not HOST:PORT"),
                 ({"REDIS_URL": "127.0.0.1:70000"}, "has a port that is not a number from 1 to 65535"),
                 ({"REDIS_URL": "rediss://127.0.0.1:6379"}, "asks for TLS"),
                 ({"REDIS_URL": "redis://u:secret@127.0.0.1"}, "REDIS_URL='127.0.0.1' is not HOST:PORT"),
                 ({"REDIS_URL": "127.0.0.1:6379", "REDIS_SOCKET_TYPE": "unix"},
                  "REDIS_SOCKET_TYPE='unix' is not supported (tcp only)"),
                 ({"REDIS_URL": "127.0.0.1:6379", "REDIS_TYPE": "sentinel"},
                  "REDIS_TYPE='sentinel' is not single or cluster"),
                 ({"REDIS_URL": "127.0.0.1:6379", "SLUICE_RLS_REDIS_FAILURE": "maybe"},
                  "SLUICE_RLS_REDIS_FAILURE='maybe' is not error, closed, open or local"),
                 ({"REDIS_URL": "127.0.0.1:6379", "SLUICE_RLS_REDIS_HASH_TAG": "key"},
                  "SLUICE_RLS_REDIS_HASH_TAG='key' is not descriptor or domain"),
                 ({"REDIS_URL": "127.0.0.1:6379", "SLUICE_RLS_REDIS_PROCESSES": "0"},
                  "SLUICE_RLS_REDIS_PROCESSES='0' is not an integer from 1 to 1000000"),
                 ({"REDIS_URL": "127.0.0.1:6379", "CACHE_KEY_PREFIX": "a{b}"}, "CACHE_KEY_PREFIX='a{b}'"),
                 ({"REDIS_URL": "127.0.0.1:6379", "SLUICE_RLS_SHARED_DIR": "/tmp"},
                  "REDIS_URL and SLUICE_RLS_SHARED_DIR are both set")]
        root = tempfile.mkdtemp(prefix="rls-rt-")
        try:
            os.makedirs(os.path.join(root, "ratelimit", "config"))
            path = os.path.join(root, "ratelimit", "config", "c.yaml")
            with open(path, "w") as f:
                f.write(REDIS_CONFIG)
            for env, msg in cases:
                r = subprocess.run([BIN], env=dict(os.environ, RUNTIME_ROOT=root, GRPC_PORT="0", PORT="0", **env),
                                   capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, 2, env)
                self.assertIn(msg, r.stderr)
                self.assertNotIn("secret", r.stderr)
            # An algorithm the Redis tier has no script for: refused with
            # its file and line.
            with open(path, "w") as f:
                f.write(REDIS_CONFIG + "  - key: log\n    rate_limit: {unit: day, requests_per_unit: 3, "
                        "algorithm: sliding-log}\n")
            r = subprocess.run([BIN], env=dict(os.environ, RUNTIME_ROOT=root, GRPC_PORT="0", PORT="0",
                                               REDIS_URL="127.0.0.1:6379"), capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(r.returncode, 2)
            self.assertIn("c.yaml:13: rate limit 'sliding-log 3/86400s' on Redis: ", r.stderr)
            self.assertIn("sliding-log", r.stderr.split("on Redis: ")[1])
        finally:
            shutil.rmtree(root, ignore_errors=True)


@unittest.skipUnless(os.environ.get("SLUICE_RLS_TEST_CLUSTER"),
                     "runs from tests/rls/redis_cluster.sh (ctest rls_redis_cluster), which starts the cluster")
class RedisClusterTest(unittest.TestCase):
    """REDIS_URL names one node of a 3-master Redis Cluster, REDIS_TYPE=cluster."""

    def test_two_servers_one_cluster(self):
        """Two sluice-rls processes, each pointed at a different node, 2
        client processes on each, 250 calls each, one limit of 500: exactly
        500; and keys of several values spread over the masters."""
        ports = [int(p) for p in os.environ["SLUICE_RLS_TEST_CLUSTER"].split()]
        servers = []
        try:
            for i in range(2):
                servers.append(Server(config=REDIS_CONFIG, REDIS_URL="127.0.0.1:%d" % ports[i],
                                      REDIS_TYPE="cluster", **SLOW_OK))
            self.assertEqual(hammer(servers, "cluster", 250), 500)
            for v in range(30):  # 30 values: every master gets some, whichever node is asked
                got = servers[v % 2].call(request(desc(("two", "v%d" % v))), timeout=10)
                self.assertEqual(got.overall_code, OK)
            sizes = [int(subprocess.run(["redis-cli", "-p", str(p), "DBSIZE"], capture_output=True, text=True,
                                        timeout=30).stdout) for p in ports]
            self.assertEqual(sum(sizes), 31, sizes)
            self.assertTrue(all(n > 0 for n in sizes), sizes)
        finally:
            for sv in servers:
                self.assertEqual(sv.stop(), 0)

    def test_descriptors_across_slots(self):
        """On a Cluster two descriptors' keys are in different slots (each
        key's hash tag is its own descriptor): no script may span them, so
        they are decided one after the other, as docs/rls.md says: the
        earlier one stays charged when the later one refuses."""
        ports = [int(p) for p in os.environ["SLUICE_RLS_TEST_CLUSTER"].split()]
        s = Server(config=REDIS_CONFIG, REDIS_URL="127.0.0.1:%d" % ports[0], REDIS_TYPE="cluster", **SLOW_OK)
        try:
            for _ in range(2):
                self.assertEqual(s.call(request(desc(("two", "slots"))), timeout=10).overall_code, OK)
            got = s.call(request(desc(("five", "slots")), desc(("two", "slots"))), timeout=10)
            self.assertEqual(got.overall_code, OVER)
            self.assertEqual([x.code for x in got.statuses], [OK, OVER])
            self.assertEqual(got.statuses[0].limit_remaining, 4)  # charged before two refused
        finally:
            self.assertEqual(s.stop(), 0)
            for p in ports:  # the other tests count the keys
                subprocess.run(["redis-cli", "-p", str(p), "FLUSHALL"], capture_output=True, timeout=30)

    def test_descriptors_one_slot_by_domain(self):
        """SLUICE_RLS_REDIS_HASH_TAG=domain: the hash tag of every key is
        the domain's, so the two descriptors above (different slots by
        default) share one slot, on one master, and are one composite on the
        Cluster too: a refusal by the second charges the first nothing.
        Then the same with leases."""
        ports = [int(p) for p in os.environ["SLUICE_RLS_TEST_CLUSTER"].split()]
        for extra in ({}, {"SLUICE_RLS_REDIS_LEASE_MAX": "1"}):
            s = Server(config=REDIS_CONFIG, REDIS_URL="127.0.0.1:%d" % ports[0], REDIS_TYPE="cluster",
                       SLUICE_RLS_REDIS_HASH_TAG="domain", **SLOW_OK, **extra)
            try:
                for _ in range(2):
                    self.assertEqual(s.call(request(desc(("two", "slots"))), timeout=10).overall_code, OK)
                got = s.call(request(desc(("five", "slots")), desc(("two", "slots"))), timeout=10)
                self.assertEqual(got.overall_code, OVER)
                self.assertEqual([x.code for x in got.statuses], [OK, OVER])
                sizes = [int(subprocess.run(["redis-cli", "-p", str(p), "DBSIZE"], capture_output=True, text=True,
                                            timeout=30).stdout) for p in ports]
                self.assertEqual(sorted(sizes), [0, 0, 1], sizes)  # two's key only: five's never written
                got = s.call(request(desc(("five", "slots"))), timeout=10)
                self.assertEqual(got.overall_code, OK)
                self.assertEqual(got.statuses[0].limit_remaining, 4, extra)  # its whole limit was left
                sizes = [int(subprocess.run(["redis-cli", "-p", str(p), "DBSIZE"], capture_output=True, text=True,
                                            timeout=30).stdout) for p in ports]
                self.assertEqual(sorted(sizes), [0, 0, 2], sizes)  # one slot, one master
            finally:
                self.assertEqual(s.stop(), 0)
                for p in ports:  # the other tests count the keys
                    subprocess.run(["redis-cli", "-p", str(p), "FLUSHALL"], capture_output=True, timeout=30)


if __name__ == "__main__":
    try:
        unittest.main(verbosity=2)
    finally:
        shutil.rmtree(GEN, ignore_errors=True)
