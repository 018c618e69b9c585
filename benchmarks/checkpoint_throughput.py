"""How fast `python -m fp4ops quantize` turns a model directory into a servable FP4 one.

A Llama-architecture model with random weights (transformers' own config and `save_pretrained`,
bf16, several shards; the default is Llama-3.2-1B's shape) is quantized in every format/layout
pair the CLI writes, on each device asked for, and the quantized directory is read back with
`fp4ops.checkpoint.load` (and, where compressed-tensors is installed, through transformers'
loader too). Prints a table and writes `checkpoint_<tag>.json` and `.md` under `--out`.

    python -m benchmarks.checkpoint_throughput --devices cpu cuda
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import tempfile
import time

import torch

import fp4ops
from fp4ops.checkpoint import load, quantize_checkpoint

PAIRS = [("nvfp4", "compressed-tensors"), ("mxfp4", "compressed-tensors"), ("nvfp4", "modelopt")]


def make_llama(path: str, hidden: int, layers: int, intermediate: int, vocab: int, shard: str) -> int:
    """A random bf16 Llama saved in shards under `path`; returns its parameter count."""
    import transformers

    config = transformers.LlamaConfig(hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                                      num_attention_heads=max(1, hidden // 64), num_key_value_heads=max(1, hidden // 256),
                                      vocab_size=vocab, tie_word_embeddings=False)
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(path, max_shard_size=shard)
    return sum(p.numel() for p in model.parameters())


def loads_through_transformers(path: str) -> str:
    """'yes' when transformers loads the directory with no missing or unexpected keys, else why not."""
    if importlib.util.find_spec("compressed_tensors") is None:
        return "skipped (no compressed-tensors)"
    import transformers

    model, info = transformers.AutoModelForCausalLM.from_pretrained(path, output_loading_info=True)
    bad = {key: value for key, value in info.items() if value}
    return "yes" if not bad else f"no: {bad}"


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.checkpoint_throughput", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--intermediate", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--shard", default="1GB", help="save_pretrained's max_shard_size")
    p.add_argument("--devices", nargs="+", default=["cuda"] if torch.cuda.is_available() else ["cpu"])
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--tag", default=None, help="file name tag (default: the first device's GPU, or cpu)")
    args = p.parse_args(argv)
    from tabulate import tabulate

    rows = []
    with tempfile.TemporaryDirectory() as work:
        src = os.path.join(work, "llama")
        params = make_llama(src, args.hidden, args.layers, args.intermediate, args.vocab, args.shard)
        shards = sum(name.endswith(".safetensors") for name in os.listdir(src))
        print(f"Llama-shaped model: {params / 1e9:.2f} B parameters, {shards} shards, bf16")
        for device in args.devices:
            for fmt, layout in PAIRS:
                dst = os.path.join(work, f"{fmt}-{layout}-{device}")
                notes: list[str] = []
                start = time.perf_counter()
                reports = quantize_checkpoint(src, dst, fmt, layout=layout, device=device, progress=False,
                                              log=notes.append)
                seconds = time.perf_counter() - start
                read_gb = sum(os.path.getsize(os.path.join(src, n)) for n in os.listdir(src) if n.endswith(".safetensors")) / 1e9
                start = time.perf_counter()
                folded = load(dst)
                load_seconds = time.perf_counter() - start
                fp4 = sum(isinstance(t, (fp4ops.NVFP4Tensor, fp4ops.MXFP4Tensor)) for t in folded.values())
                assert fp4 == len(reports), (fp4, len(reports))
                rows.append({"device": device, "format": fmt, "layout": layout, "weights": len(reports),
                             "seconds": seconds, "read_gb": read_gb, "gb_per_s": read_gb / seconds,
                             "min_sqnr_db": min(r.sqnr_db for r in reports), "load_seconds": load_seconds,
                             "transformers": loads_through_transformers(dst) if layout == "compressed-tensors" else "n/a"})
                print(rows[-1])
                torch.cuda.empty_cache() if torch.cuda.is_available() else None
    table = tabulate([[r["device"], r["format"], r["layout"], r["weights"], f"{r['read_gb']:.2f}", f"{r['seconds']:.2f}",
                       f"{r['gb_per_s']:.2f}", f"{r['min_sqnr_db']:.2f}", f"{r['load_seconds']:.2f}", r["transformers"]]
                      for r in rows], headers=["device", "format", "layout", "weights", "GB in", "s", "GB/s",
                                               "min SQNR dB", "load s", "transformers loads"], tablefmt="github")
    print(table)
    tag = args.tag or (torch.cuda.get_device_name().split()[1].lower() if "cuda" in args.devices[0] else "cpu")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"checkpoint_{tag}.json"), "w") as f:
        json.dump({"params": params, "shards": shards, "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, f"checkpoint_{tag}.md"), "w") as f:
        f.write(f"# Checkpoint quantizer throughput ({tag})\n\nLlama-shaped, {params / 1e9:.2f} B parameters, "
                f"{shards} bf16 shards; wall time of `quantize_checkpoint` (read, quantize, write, rename).\n\n{table}\n")
    return rows


if __name__ == "__main__":
    main()
