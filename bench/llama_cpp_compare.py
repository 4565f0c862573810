#!/usr/bin/env python3
"""Corolla's CPU engine beside llama.cpp on the same GGUF files, alternated in one run.

Writes one random TinyLlama-1.1B-shaped model as an F16 GGUF (gguf package), quantizes it with llama.cpp's own
llama-quantize into each format, then for every format and round runs, in turn: llama.cpp's llama-bench (decode of
64 tokens, prefill of 512), Corolla's bench_decode on the same file (decode and a 512-token prefill), and a read
sweep (bench_memory) for the bound. Every figure is printed beside the others of its round. A second table times
loading: each side's whole process for one token of output (llama-bench with one generated token; `corolla
generate --max-new-tokens 1`), its wall time and peak resident memory, alternated in the same rounds.

llama.cpp is built from the source distribution of the PyPI package llama-cpp-python (which carries it), with
GGML_NATIVE=ON: a benchmark's dependency only, never the build's or the tests'. With --isa avx2 both sides are held
to AVX2: llama.cpp built for AVX2 + FMA + F16C alone, Corolla run with COROLLA_ISA=avx2. --isa native-noamx builds
llama.cpp for the machine without its AMX kernels (for machines where they fail) and leaves Corolla as it is.

  python3 bench/llama_cpp_compare.py --build build --work /tmp/llama-compare [--formats Q8_0,Q4_0,Q4_K_M]
                                     [--rounds 3] [--threads 2] [--isa native|native-noamx|avx2]
"""
import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np

SHAPE = dict(vocab=32000, hidden=2048, layers=22, heads=32, kv_heads=4, intermediate=5632)


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


ISA_FLAGS = {
    "native": ["-DGGML_NATIVE=ON"],
    # Where llama.cpp's AMX path fails (a VM that grants Corolla the tiles gave its repacked Q8_0 a protection
    # fault): native without AMX; Corolla keeps its own.
    "native-noamx": ["-DGGML_NATIVE=ON", "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
                     "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"],
    "avx2": ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
             "-DGGML_AVX512=OFF", "-DGGML_AVX_VNNI=OFF", "-DGGML_BMI2=ON"],
}


def build_llama_cpp(work, isa):
    """llama-bench and llama-quantize, built once per ISA from llama-cpp-python's source distribution."""
    src = os.path.join(work, "llama.cpp")
    build = os.path.join(src, "build" if isa == "native" else f"build-{isa}")
    bench = os.path.join(build, "bin", "llama-bench")
    if os.path.exists(bench):
        return os.path.dirname(bench)
    if not os.path.exists(src):
        os.makedirs(work, exist_ok=True)
        run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", work,
             "llama-cpp-python"])
        sdist = next(f for f in os.listdir(work) if f.startswith("llama_cpp_python") and f.endswith(".tar.gz"))
        run(["tar", "xzf", os.path.join(work, sdist), "-C", work])
        os.symlink(os.path.join(work, sdist[:-len(".tar.gz")], "vendor", "llama.cpp"), src)
    run(["cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF",
         "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF"] + ISA_FLAGS[isa])
    run(["cmake", "--build", build, "-j", str(os.cpu_count()), "--target", "llama-bench", "llama-quantize"])
    return os.path.dirname(bench)


def write_f16_gguf(path):
    """A llama of TinyLlama's shape with random weights (a placeholder vocabulary: the benchmarks feed ids)."""
    import gguf

    s = SHAPE
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(2048)
    w.add_embedding_length(s["hidden"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["intermediate"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_rope_dimension_count(s["hidden"] // s["heads"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<t{i}>".encode() for i in range(s["vocab"])])
    w.add_token_scores([0.0] * s["vocab"])
    w.add_token_types([gguf.TokenType.NORMAL] * s["vocab"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def matrix(rows, cols):
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    hd = s["hidden"] // s["heads"]
    w.add_tensor("token_embd.weight", matrix(s["vocab"], s["hidden"]))
    for b in range(s["layers"]):
        p = f"blk.{b}."
        w.add_tensor(p + "attn_norm.weight", np.ones(s["hidden"], np.float32))
        w.add_tensor(p + "attn_q.weight", matrix(s["hidden"], s["hidden"]))
        w.add_tensor(p + "attn_k.weight", matrix(s["kv_heads"] * hd, s["hidden"]))
        w.add_tensor(p + "attn_v.weight", matrix(s["kv_heads"] * hd, s["hidden"]))
        w.add_tensor(p + "attn_output.weight", matrix(s["hidden"], s["hidden"]))
        w.add_tensor(p + "ffn_norm.weight", np.ones(s["hidden"], np.float32))
        w.add_tensor(p + "ffn_gate.weight", matrix(s["intermediate"], s["hidden"]))
        w.add_tensor(p + "ffn_up.weight", matrix(s["intermediate"], s["hidden"]))
        w.add_tensor(p + "ffn_down.weight", matrix(s["hidden"], s["intermediate"]))
    w.add_tensor("output_norm.weight", np.ones(s["hidden"], np.float32))
    w.add_tensor("output.weight", matrix(s["vocab"], s["hidden"]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama_bench(bin_dir, model, threads):
    """(decode tokens/s over 64 tokens, prefill tokens/s over 512) from llama-bench, one repetition each."""
    out = run([os.path.join(bin_dir, "llama-bench"), "-m", model, "-t", str(threads), "-p", "512", "-n", "64",
               "-r", "1", "-o", "json"])
    rows = json.loads(out)
    decode = next(r["avg_ts"] for r in rows if r["n_gen"] > 0)
    prefill = next(r["avg_ts"] for r in rows if r["n_prompt"] > 0)
    return decode, prefill


def corolla_bench(build, model, threads, isa):
    """(decode tokens/s, median of 64 steps; prefill tokens/s over 512) from bench_decode."""
    env = dict(os.environ)
    if not isa.startswith("native"):
        env["COROLLA_ISA"] = isa
    out = run([os.path.join(build, "bin", "bench_decode"), f"--model={model}", f"--threads={threads}",
               "--tokens=16", "--rounds=4", "--prefill=512", "--context=1024"], env=env)
    decode = float(re.search(r"decode\s*:\s*([\d.]+) tokens/s", out).group(1))
    seconds = float(re.search(r"prefill: 512 tokens in ([\d.]+) s", out).group(1))
    return decode, 512 / seconds


def whole_process(cmd, env=None):
    """(wall seconds, peak resident MiB) of one run of cmd, its output discarded."""
    import time

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{cmd[0]} failed with status {status}")
    return wall, usage.ru_maxrss / 1024


def load_figures(bin_dir, build, model, threads, isa):
    """Whole-process (wall s, peak MiB) for one token: llama.cpp's llama-bench, then Corolla's generate."""
    env = dict(os.environ)
    if not isa.startswith("native"):
        env["COROLLA_ISA"] = isa
    llama = whole_process([os.path.join(bin_dir, "llama-bench"), "-m", model, "-t", str(threads), "-p", "0", "-n",
                           "1", "-r", "1"])
    corolla = whole_process([os.path.join(build, "bin", "corolla"), "generate", "--model", model, "--prompt-ids",
                             "1", "--max-new-tokens", "1", "--threads", str(threads)], env)
    return llama, corolla


def decode_bytes(path):
    """Bytes a decode step reads: every tensor but the embedding table, of which it reads one row."""
    import gguf

    return sum(int(t.n_bytes) for t in gguf.GGUFReader(path).tensors if t.name != "token_embd.weight")


def sweep_gbs(build, threads):
    out = run([os.path.join(build, "bin", "bench_memory"), f"--threads={threads}", "--mib=1024", "--reps=3"])
    return float(re.search(r"machine read bandwidth with \d+ threads: ([\d.]+) GB/s", out).group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--work", default="/tmp/llama-compare")
    ap.add_argument("--formats", default="F16,Q8_0,Q4_0,Q4_1,Q5_0,Q4_K_S,Q4_K_M,Q5_K_M,Q6_K")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--isa", choices=sorted(ISA_FLAGS), default="native")
    a = ap.parse_args()

    bin_dir = build_llama_cpp(a.work, a.isa)
    f16 = os.path.join(a.work, "tinyllama-F16.gguf")
    if not os.path.exists(f16):
        write_f16_gguf(f16)
    files = {}
    for fmt in a.formats.split(","):
        path = f16 if fmt == "F16" else os.path.join(a.work, f"tinyllama-{fmt}.gguf")
        if not os.path.exists(path):
            run([os.path.join(bin_dir, "llama-quantize"), f16, path, fmt])
        files[fmt] = path

    print(f"{a.isa}, {a.threads} threads; decode: 64 tokens (llama-bench) / median of 64 steps (bench_decode); "
          "prefill: 512 tokens; sweep: bench_memory's best, GB/s")
    print("| format | GB read per token | round | sweep GB/s | decode llama.cpp | decode Corolla | ratio | of bound (Corolla) "
          "| prefill llama.cpp | prefill Corolla | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    loads = []
    for r in range(1, a.rounds + 1):
        for fmt, path in files.items():
            gb = decode_bytes(path) / 1e9
            ld, lp = llama_bench(bin_dir, path, a.threads)
            cd, cp = corolla_bench(a.build, path, a.threads, a.isa)
            sweep = sweep_gbs(a.build, a.threads)
            print(f"| {fmt} | {gb:.2f} | {r} | {sweep:.1f} | {ld:.2f} | {cd:.2f} | {cd / ld:.2f} | "
                  f"{cd * gb / sweep:.2f} | {lp:.1f} | {cp:.1f} | {cp / lp:.2f} |", flush=True)
            loads.append((fmt, r, *load_figures(bin_dir, a.build, path, a.threads, a.isa)))
    print("\nload and one token, whole process: wall s and peak resident MiB")
    print("| format | round | llama.cpp s | Corolla s | ratio | llama.cpp MiB | Corolla MiB |")
    print("|---|---|---|---|---|---|---|")
    for fmt, r, (lw, lm), (cw, cm) in loads:
        print(f"| {fmt} | {r} | {lw:.2f} | {cw:.2f} | {cw / lw:.2f} | {lm:.0f} | {cm:.0f} |")


if __name__ == "__main__":
    main()
