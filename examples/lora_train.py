"""Fine-tune a Llama-shaped language model with LoRA adapters (PEFT), the way a parameter-efficient fine-tuning script
does it: the base model built from a config (no download) and held in bf16, LoRA on the attention and MLP projections,
AdamW on the adapters only, fixed-shape batches of synthetic tokens.

    python3 examples/lora_train.py [--batch 8] [--seq 1024] [--steps 10] [--layers 16] [--d-model 1024] ...

Defaults: 16 layers of width 1024 (MLP 2816, 16 heads, vocabulary 32000, ~270M base parameters), LoRA rank 16 on
q, k, v, o, gate, up and down projections, 8 sequences of 1024 tokens a step.
"""
from __future__ import annotations

import argparse
import time

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10, help="training steps")
    p.add_argument("--batch", type=int, default=8, help="sequences per step")
    p.add_argument("--seq", type=int, default=1024, help="tokens per sequence")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--rank", type=int, default=16, help="LoRA rank")
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=5, help="print the loss every N steps (0: never)")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(args.seed)
    config = LlamaConfig(num_hidden_layers=args.layers, hidden_size=args.d_model, num_attention_heads=args.heads,
                         num_key_value_heads=args.heads, intermediate_size=(args.d_model * 11 // 4 + 255) // 256 * 256,
                         vocab_size=args.vocab, max_position_embeddings=args.seq)
    base = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
    lora = LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.0, task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = get_peft_model(base, lora)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=args.lr)
    print(f"LoRA: {sum(p.numel() for p in trainable) / 1e6:.2f}M trainable of "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters on {device}, batch {args.batch}, "
          f"seq {args.seq}", flush=True)
    data = torch.Generator().manual_seed(args.seed)
    started = time.perf_counter()
    for step in range(1, args.steps + 1):
        tokens = torch.randint(args.vocab, (args.batch, args.seq), generator=data).to(device)
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if args.log_every and step % args.log_every == 0:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    print(f"done, {args.steps} steps in {time.perf_counter() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
