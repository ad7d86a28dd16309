"""A small transcriber speaking whisper.cpp's server API, backed by pocketsphinx.

It exists so the f5-verify client can be tested against a real speech
recogniser without a GPU or a whisper model: pocketsphinx ships an offline
US-English model inside its wheel.

    POST /inference   multipart: file (16-bit PCM wav), response_format=json,
                      temperature, language (absent, "en" or "auto")
    answer            {"text": "..."}

Loopback only. The first line on stdout is "listening on HOST:PORT" so a test
that asked for port 0 learns the port. The server exits by itself after
--idle-exit seconds without a request, so a test that dies cannot leave it
running for long.
"""

import argparse
import io
import json
import math
import os
import sys
import time
import wave
from http.server import BaseHTTPRequestHandler, HTTPServer

MODEL_RATE = 16000
MAX_BODY = 32 * 1024 * 1024


def parse_multipart(body, content_type):
    """Fields of a multipart/form-data body as {name: bytes}."""
    boundary = None
    for part in content_type.split(";"):
        part = part.strip()
        if part.lower().startswith("boundary="):
            boundary = part[len("boundary="):].strip('"')
    if not boundary:
        raise ValueError("multipart body without a boundary")
    delimiter = b"--" + boundary.encode("latin-1")
    fields = {}
    for chunk in body.split(delimiter)[1:]:
        if chunk.startswith(b"--"):
            break
        chunk = chunk[2:] if chunk.startswith(b"\r\n") else chunk
        head, sep, value = chunk.partition(b"\r\n\r\n")
        if not sep:
            raise ValueError("multipart part without a header end")
        if value.endswith(b"\r\n"):
            value = value[:-2]
        name = None
        for line in head.decode("latin-1").split("\r\n"):
            if line.lower().startswith("content-disposition:"):
                for item in line.split(";"):
                    item = item.strip()
                    if item.startswith("name="):
                        name = item[len("name="):].strip('"')
        if name is None:
            raise ValueError("multipart part without a name")
        fields[name] = value
    return fields


def read_wav(data):
    """Mono samples in [-1, 1] and the rate of a 16-bit PCM wav."""
    with wave.open(io.BytesIO(data), "rb") as w:
        if w.getsampwidth() != 2:
            raise ValueError("file is not 16-bit PCM (sample width %d bytes)" % w.getsampwidth())
        channels, rate, frames = w.getnchannels(), w.getframerate(), w.getnframes()
        raw = w.readframes(frames)
    import array

    pcm = array.array("h")
    pcm.frombytes(raw)
    if sys.byteorder == "big":
        pcm.byteswap()
    if channels > 1:
        mono = [sum(pcm[i:i + channels]) / (channels * 32768.0) for i in range(0, len(pcm), channels)]
    else:
        mono = [s / 32768.0 for s in pcm]
    return mono, rate


def resample(samples, rate_in, rate_out, half_width=16):
    """Hann-windowed sinc resampling; cut-off at the lower Nyquist so
    downsampling does not fold the upper band into the speech."""
    if rate_in == rate_out or not samples:
        return samples
    ratio = rate_out / rate_in
    cutoff = min(1.0, ratio)
    n_out = int(len(samples) * ratio)
    out = [0.0] * n_out
    span = half_width / cutoff
    n_in = len(samples)
    for k in range(n_out):
        centre = k / ratio
        lo = max(0, int(math.floor(centre - span)))
        hi = min(n_in - 1, int(math.ceil(centre + span)))
        acc = 0.0
        for i in range(lo, hi + 1):
            x = (i - centre) * cutoff
            if abs(x) >= half_width:
                continue
            sinc = 1.0 if x == 0 else math.sin(math.pi * x) / (math.pi * x)
            window = 0.5 + 0.5 * math.cos(math.pi * x / half_width)
            acc += samples[i] * sinc * window
        out[k] = acc * cutoff
    return out


class Transcriber:
    def __init__(self):
        from pocketsphinx import Decoder

        self.decoder = Decoder(samprate=MODEL_RATE, logfn=os.devnull)

    def transcribe(self, samples):
        pcm = bytearray()
        for s in samples:
            v = int(round(max(-1.0, min(1.0, s)) * 32767))
            pcm += v.to_bytes(2, "little", signed=True)
        self.decoder.start_utt()
        self.decoder.process_raw(bytes(pcm), False, True)
        self.decoder.end_utt()
        hyp = self.decoder.hyp()
        return hyp.hypstr if hyp is not None else ""


def make_handler(transcriber, activity):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):
            sys.stderr.write("asr-server: " + (fmt % args) + "\n")

        def reply(self, status, obj):
            body = json.dumps(obj).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

        def do_GET(self):
            self.reply(404, {"error": "only POST /inference is served"})

        def do_POST(self):
            activity["last"] = time.monotonic()
            if self.path.split("?")[0] != "/inference":
                self.reply(404, {"error": "unknown path %s" % self.path})
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                self.reply(400, {"error": "bad Content-Length"})
                return
            if length <= 0 or length > MAX_BODY:
                self.reply(400, {"error": "body length %d outside 1..%d" % (length, MAX_BODY)})
                return
            body = self.rfile.read(length)
            try:
                fields = parse_multipart(body, self.headers.get("Content-Type", ""))
            except ValueError as e:
                self.reply(400, {"error": str(e)})
                return
            if "file" not in fields:
                self.reply(400, {"error": "missing required field 'file'"})
                return
            fmt = fields.get("response_format", b"json").decode("utf-8", "replace")
            if fmt != "json":
                self.reply(400, {"error": "only response_format=json is served, got %r" % fmt})
                return
            language = fields.get("language", b"en").decode("utf-8", "replace")
            if language not in ("en", "auto"):
                self.reply(400, {"error": "this transcriber only knows English, got language %r" % language})
                return
            try:
                samples, rate = read_wav(fields["file"])
            except (ValueError, EOFError, wave.Error) as e:
                self.reply(400, {"error": "failed to read WAV file: %s" % e})
                return
            text = transcriber.transcribe(resample(samples, rate, MODEL_RATE))
            self.reply(200, {"text": text})

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--idle-exit", type=float, default=120.0, help="seconds without a request before exiting")
    args = parser.parse_args()
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        parser.error("this test server listens on loopback only")

    transcriber = Transcriber()
    activity = {"last": time.monotonic()}
    server = HTTPServer((args.host, args.port), make_handler(transcriber, activity))
    server.timeout = 0.5
    host, port = server.server_address[:2]
    print("listening on %s:%d" % (host, port), flush=True)
    while time.monotonic() - activity["last"] < args.idle_exit:
        server.handle_request()
    server.server_close()


if __name__ == "__main__":
    main()
