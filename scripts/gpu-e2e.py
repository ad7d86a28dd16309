#!/usr/bin/env python3
"""The whole pipeline on a device, through the `f5` binary: synthesis and the daemon.

    python3 scripts/gpu-e2e.py F5_BINARY OUT_DIR [--device cuda]

Runs `f5 synth` on the tiny fixtures with one seed on the CPU and on the device (f32, then bf16
weights) and compares the generated mel and the wave; then starts `f5 serve --device …`, stores a
voice over HTTP and asks `POST /tts` for speech. Writes OUT_DIR/e2e.json and exits non-zero when a
required check fails. Needs only the Python standard library (the GPU machine has no numpy), so it
also runs here with `--device cpu` to prove the script itself before a GPU is lent.
"""

import json
import os
import struct
import subprocess
import sys
import time
import urllib.request
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "fixtures")
MODEL = ["-m", f"{FIX}/models/f5-tiny-v1", "--vocab", f"{FIX}/vocab.txt", "--vocoder", f"{FIX}/models/vocos-tiny"]
REF_WAV = f"{FIX}/audio/ref_22050.wav"
REF_TEXT = "The birch canoe slid on the smooth planks."
TEXT = "Glue the sheet to the dark blue background. It is easy to tell the depth of a well."

# f32 on the device differs from the CPU only in summation order (~1e-7 relative per op); over 16
# sampler steps and the vocoder that stays far below 1e-6 NMSE, while any wrong kernel gives O(1).
# bf16 weights round every GEMM input to 8 mantissa bits (~1e-4 NMSE per forward, see gpu_bench):
# reported, with a loose bound that still catches garbage.
LIMITS = {"f32": 1e-6, "bf16": 2e-2}
# Kokoro (the small random-weight model in the release layout, a named voice, phonemes given so
# no G2P runs): the source's phase is a running sum of F0 over thousands of samples, so f32
# summation-order differences grow there; 1e-4 NMSE still catches any wrong kernel (O(1)).
KOKORO = ["-m", f"{FIX}/kokoro/release-small", "--voice", "af_heart", "--phonemes"]
KOKORO_TEXT = "ðə bˈɜːʧ kənˈuː slˈɪd ɒn ðə smˈuːð plˈæŋks."
KOKORO_LIMITS = {"f32": 1e-4, "bf16": 5e-2}


def read_npy_f32(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise ValueError(f"{path}: not an .npy file")
    major = data[6]
    if major == 1:
        header_len = struct.unpack("<H", data[8:10])[0]
        start = 10 + header_len
    else:
        header_len = struct.unpack("<I", data[8:12])[0]
        start = 12 + header_len
    header = data[start - header_len : start].decode("latin1")
    if "'<f4'" not in header:
        raise ValueError(f"{path}: not little-endian float32 ({header.strip()})")
    body = data[start:]
    return list(struct.unpack(f"<{len(body) // 4}f", body))


def nmse(reference, other):
    if len(reference) != len(other):
        return float("inf")
    num = sum((a - b) ** 2 for a, b in zip(reference, other))
    den = sum(a * a for a in reference) or 1e-30
    return num / den


def synth(f5, out, tag, device, precision):
    wave, mel = f"{out}/{tag}.npy", f"{out}/{tag}-mel.npy"
    cmd = [f5, "synth", "-q", *MODEL, "--ref", REF_WAV, "--ref-text", REF_TEXT, "-t", TEXT]
    cmd += ["--seed", "7", "--nfe", "16", "-o", wave, "--save-mel", mel, "--device", device, "--precision", precision]
    t0 = time.time()
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    seconds = time.time() - t0
    if run.returncode != 0:
        return None, None, seconds, run.stderr.strip()
    return read_npy_f32(wave), read_npy_f32(mel), seconds, ""


def kokoro_synth(f5, out, tag, device, precision):
    wave = f"{out}/kokoro-{tag}.npy"
    cmd = [f5, "synth", "-q", *KOKORO, "-t", KOKORO_TEXT, "--seed", "7", "-o", wave, "--device", device, "--precision", precision]
    t0 = time.time()
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    seconds = time.time() - t0
    if run.returncode != 0:
        return None, seconds, run.stderr.strip()
    return read_npy_f32(wave), seconds, ""


def multipart(fields, files):
    boundary = uuid.uuid4().hex
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    for name, (filename, blob) in files.items():
        head = f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
        parts.append(head.encode() + b"Content-Type: audio/wav\r\n\r\n" + blob + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def serve(f5, out, device):
    """Starts the daemon on the device, stores a voice, asks for speech; returns a report."""
    voices = f"{out}/voices"
    os.makedirs(voices, exist_ok=True)
    cmd = [f5, "serve", *MODEL, "--addr", "127.0.0.1:0", "--voices", voices, "--device", device]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    report = {"ok": False}
    try:
        line = proc.stderr.readline()
        if "http://" not in line:
            report["error"] = f"no address in {line.strip()!r}; exit code {proc.poll()}"
            return report
        base = "http://" + line.split("http://", 1)[1].split()[0]
        with open(REF_WAV, "rb") as f:
            body, ctype = multipart({"id": "alice", "transcript": REF_TEXT}, {"audio": ("ref.wav", f.read())})
        req = urllib.request.Request(f"{base}/voices", data=body, headers={"Content-Type": ctype}, method="POST")
        urllib.request.urlopen(req, timeout=30).read()
        t0 = time.time()
        payload = json.dumps({"voice": "alice", "text": TEXT, "seed": 7, "nfe": 16}).encode()
        req = urllib.request.Request(f"{base}/tts", data=payload, headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=120) as resp:
            wav = resp.read()
            report["status"] = resp.status
            report["content_type"] = resp.headers.get("Content-Type")
        report["seconds"] = round(time.time() - t0, 3)
        report["bytes"] = len(wav)
        health = json.loads(urllib.request.urlopen(f"{base}/health", timeout=10).read())
        report["health"] = health
        report["ok"] = report["status"] == 200 and wav[:4] == b"RIFF" and len(wav) > 44 + 24000
    except Exception as e:  # noqa: BLE001 - every failure becomes part of the report
        report["error"] = repr(e)
    finally:
        proc.kill()
        proc.wait()
    return report


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    f5, out = os.path.abspath(args[0]), os.path.abspath(args[1])
    device = args[args.index("--device") + 1] if "--device" in args else "cuda"
    os.makedirs(out, exist_ok=True)
    doc = {"device": device, "runs": {}, "checks": []}
    cpu_wave, cpu_mel, secs, err = synth(f5, out, "cpu", "cpu", "f32")
    doc["runs"]["cpu"] = {"seconds": round(secs, 3), "error": err}
    ok = cpu_wave is not None
    precisions = ["f32", "bf16"] if device.startswith("cuda") else ["f32"]
    for precision in precisions:
        tag = f"{device.replace(':', '')}-{precision}"
        wave, mel, secs, err = synth(f5, out, tag, device, precision)
        doc["runs"][tag] = {"seconds": round(secs, 3), "error": err}
        if wave is None or cpu_wave is None:
            doc["checks"].append({"run": tag, "ok": False, "error": err or "the CPU run failed"})
            ok = False
            continue
        check = {"run": tag, "limit": LIMITS[precision], "nmse_mel": nmse(cpu_mel, mel), "nmse_wave": nmse(cpu_wave, wave)}
        check["ok"] = check["nmse_mel"] <= check["limit"] and check["nmse_wave"] <= check["limit"]
        doc["checks"].append(check)
        ok = ok and check["ok"]
    k_cpu, secs, err = kokoro_synth(f5, out, "cpu", "cpu", "f32")
    doc["runs"]["kokoro-cpu"] = {"seconds": round(secs, 3), "error": err}
    ok = ok and k_cpu is not None
    for precision in precisions:
        tag = f"{device.replace(':', '')}-{precision}"
        wave, secs, err = kokoro_synth(f5, out, tag, device, precision)
        doc["runs"][f"kokoro-{tag}"] = {"seconds": round(secs, 3), "error": err}
        if wave is None or k_cpu is None:
            doc["checks"].append({"run": f"kokoro-{tag}", "ok": False, "error": err or "the CPU run failed"})
            ok = False
            continue
        check = {"run": f"kokoro-{tag}", "limit": KOKORO_LIMITS[precision], "nmse_wave": nmse(k_cpu, wave)}
        check["ok"] = check["nmse_wave"] <= check["limit"]
        doc["checks"].append(check)
        ok = ok and check["ok"]
    doc["serve"] = serve(f5, out, device)
    ok = ok and doc["serve"]["ok"]
    doc["ok"] = ok
    with open(os.path.join(out, "e2e.json"), "w") as f:
        json.dump(doc, f, indent=2)
    print(json.dumps(doc, indent=2))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
