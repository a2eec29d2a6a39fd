"""Train a randomly initialised GPT-2 with the transformers `Trainer` on a synthetic dataset of sequences of varying
length, padded per batch by a data collator, the way a fine-tuning script built on `Trainer` does it: bf16 on
CUDA, no checkpoints, no reporting integrations, output in a temporary folder.

Sequence lengths are drawn per sample from a long-tailed (log-normal) distribution clipped to --seq-len, as text
lengths are; each batch is padded to its longest sequence, so the padded length changes every step.

    python3 examples/hf_trainer_gpt2.py [--steps 80] [--batch 16] [--layers 12] [--d-model 768] ...

Defaults: a GPT-2 small shape (12 layers, width 768, ~124M parameters), 16 sequences per step of 16-1024
tokens (median 256). Needs transformers and accelerate (which `Trainer` requires).
"""
from __future__ import annotations

import argparse
import random
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=80, help="training steps (Trainer's max_steps)")
    p.add_argument("--batch", type=int, default=16, help="sequences per step")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--seq-len", type=int, nargs=2, default=[16, 1024], metavar=("LOW", "HIGH"))
    p.add_argument("--median-len", type=int, default=256, help="median of the log-normal sequence lengths")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=25, help="Trainer's logging_steps (0: no logging)")
    return p.parse_args(argv)


class SyntheticText(torch.utils.data.Dataset):
    """Sample i: random tokens of a log-normal length, drawn from seed and i alone (any order, any worker)."""

    def __init__(self, size: int, args: argparse.Namespace):
        self.size, self.args = size, args

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> dict:
        key = self.args.seed * 1_000_003 + i
        low, high = self.args.seq_len
        length = min(high, max(low, round(random.Random(key).lognormvariate(0.0, 0.8) * self.args.median_len)))
        return {"input_ids": torch.randint(self.args.vocab, (length,), generator=torch.Generator().manual_seed(key))}


def pad_batch(samples: list[dict]) -> dict:
    """Right-pad to the longest sample: attention_mask 0 and labels -100 (ignored by the loss) on padding."""
    longest = max(len(s["input_ids"]) for s in samples)
    ids = torch.zeros(len(samples), longest, dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for row, s in enumerate(samples):
        n = len(s["input_ids"])
        ids[row, :n] = labels[row, :n] = s["input_ids"]
        mask[row, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def main(argv=None) -> None:
    args = parse_args(argv)
    cuda = torch.cuda.is_available()
    torch.manual_seed(args.seed)
    config = GPT2Config(n_layer=args.layers, n_embd=args.d_model, n_head=args.heads, vocab_size=args.vocab,
                        n_positions=args.seq_len[1], bos_token_id=args.vocab - 1, eos_token_id=args.vocab - 1,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config)
    print(f"GPT-2: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
          f"{'cuda' if cuda else 'cpu'}", flush=True)
    with tempfile.TemporaryDirectory(prefix="hf_trainer_gpt2-") as out:
        # Only long-standing arguments (each a TrainingArguments field in transformers 5.17 and 5.24).
        training = TrainingArguments(
            output_dir=out, max_steps=args.steps, per_device_train_batch_size=args.batch, learning_rate=args.lr,
            bf16=cuda, use_cpu=not cuda, seed=args.seed, save_strategy="no", report_to="none",
            logging_strategy="steps" if args.log_every else "no", logging_steps=max(1, args.log_every),
            disable_tqdm=True, remove_unused_columns=False, dataloader_num_workers=0)
        trainer = Trainer(model=model, args=training, data_collator=pad_batch,
                          train_dataset=SyntheticText(args.steps * args.batch, args))
        result = trainer.train()
    if cuda:
        print(f"peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
              f"reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB", flush=True)
    print(f"done, {result.global_step} steps, train loss {result.training_loss:.3f}", flush=True)


if __name__ == "__main__":
    main()
