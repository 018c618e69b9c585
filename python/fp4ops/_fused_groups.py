"""Which linear weights a serving engine fuses into one layer, read off their module names.

vLLM, SGLang and TensorRT-LLM load q/k/v and gate/up (and each MoE expert's w1/w3) into one fused
linear with ONE NVFP4 global scale; given per-tensor scales, vLLM's ModelOpt loader takes their
maximum, which crushes the member with the smallest amax. So the checkpoint quantizer gives each
group one global scale from the group's joint amax, and quantizes or skips a group as a whole.
"""

from __future__ import annotations

import re

# (pattern over a weight's full name, the group's member names). The pattern's first group is the
# shared prefix, its second the member; a group needs at least two members present.
_FUSED = [
    (re.compile(r"^(.*\.)(q_proj|k_proj|v_proj)\.weight$"), "qkv"),
    (re.compile(r"^(.*\.)(query|key|value)\.weight$"), "qkv"),  # BERT-style self-attention
    (re.compile(r"^(.*\.)(gate_proj|up_proj)\.weight$"), "gate_up"),
    (re.compile(r"^(.*\.experts\.\d+\.)(w1|w3)\.weight$"), "w13"),
]

# MoE routers: a module named exactly `gate` (Mixtral's `block_sparse_moe.gate`, Qwen-MoE's
# `mlp.gate`; never `gate_proj`) or `router`, and Qwen-MoE's `shared_expert_gate` (the shared
# expert's one-output gate, a plain dense Linear in engines). Engines keep them dense.
_ROUTER = re.compile(r"(^|\.)(gate|router|shared_expert_gate)\.weight$")


def is_router(name: str) -> bool:
    return _ROUTER.search(name) is not None


def fused_groups(names) -> dict[str, str]:
    """{weight name: its group's key} for every weight that shares a fused layer with at least one
    other weight present in `names`; weights in no group are absent."""
    members: dict[str, list[str]] = {}
    for name in names:
        for pattern, kind in _FUSED:
            match = pattern.match(name)
            if match:
                members.setdefault(f"{match[1]}{{{kind}}}", []).append(name)
                break
    return {name: key for key, group in members.items() if len(group) > 1 for name in group}
