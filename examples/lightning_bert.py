"""Fine-tune a randomly initialised BERT for sequence classification with a Lightning `Trainer` on synthetic token
batches of varying shape: transformers' BertForSequenceClassification built from a BertConfig (no download),
AdamW, bf16-mixed precision on CUDA; no checkpoints, no logger, no progress bar.

Every step's batch (its number of sequences, its padded length, and each sequence's own length under the attention
mask) is drawn from the seed and the step index, as a length-bucketing data pipeline hands them over, so
activations and attention change size every step.

    python3 examples/lightning_bert.py [--steps 150] [--batch 16 64] [--seq-len 64 512] [--layers 12] ...

Defaults: a BERT-base shape (12 layers, width 768, ~110M parameters), 16-64 sequences padded to 64-512 tokens.
Needs transformers and Lightning (`lightning` or `pytorch_lightning`).
"""
from __future__ import annotations

import argparse
import random

import torch
from transformers import BertConfig, BertForSequenceClassification

try:
    import lightning as L
except ImportError:
    import pytorch_lightning as L


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=150, help="training steps (Trainer's max_steps)")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--labels", type=int, default=4, help="classes")
    p.add_argument("--batch", type=int, nargs=2, default=[16, 64], metavar=("LOW", "HIGH"))
    p.add_argument("--seq-len", type=int, nargs=2, default=[64, 512], metavar=("LOW", "HIGH"))
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=25, help="print the loss every N steps (0: never)")
    return p.parse_args(argv)


class SyntheticBatches(torch.utils.data.Dataset):
    """Item i is a whole padded batch drawn from seed and i alone, so any order or worker gives the same batches."""

    def __init__(self, args: argparse.Namespace):
        self.args = args

    def __len__(self) -> int:
        return self.args.steps

    def __getitem__(self, i: int) -> dict:
        key = self.args.seed * 1_000_003 + i
        rng, gen = random.Random(key), torch.Generator().manual_seed(key)
        batch, seq = rng.randint(*self.args.batch), rng.randint(*self.args.seq_len)
        lengths = torch.randint(max(1, seq // 2), seq + 1, (batch, 1), generator=gen)   # the bucket: seq/2..seq
        mask = (torch.arange(seq) < lengths).long()
        ids = torch.randint(1, self.args.vocab, (batch, seq), generator=gen) * mask   # 0 = [PAD]
        return {"input_ids": ids, "attention_mask": mask,
                "labels": torch.randint(self.args.labels, (batch,), generator=gen)}


class Classifier(L.LightningModule):
    def __init__(self, args: argparse.Namespace):
        super().__init__()
        self.args = args
        config = BertConfig(vocab_size=args.vocab, hidden_size=args.d_model, num_hidden_layers=args.layers,
                            num_attention_heads=args.heads, intermediate_size=4 * args.d_model,
                            max_position_embeddings=args.seq_len[1], num_labels=args.labels)
        self.model = BertForSequenceClassification(config)

    def training_step(self, batch: dict, index: int) -> torch.Tensor:
        loss = self.model(**batch).loss
        if self.args.log_every and (self.global_step + 1) % self.args.log_every == 0:
            print(f"step {self.global_step + 1}/{self.args.steps} loss {loss.item():.3f}", flush=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.args.lr)


def main(argv=None) -> None:
    args = parse_args(argv)
    cuda = torch.cuda.is_available()
    torch.manual_seed(args.seed)
    torch.set_float32_matmul_precision("high")
    module = Classifier(args)
    print(f"BERT: {sum(p.numel() for p in module.parameters()) / 1e6:.1f}M parameters", flush=True)
    trainer = L.Trainer(accelerator="gpu" if cuda else "cpu", devices=1, max_steps=args.steps,
                        precision="bf16-mixed" if cuda else "32-true", enable_progress_bar=False, logger=False,
                        enable_checkpointing=False, enable_model_summary=False)
    data = torch.utils.data.DataLoader(SyntheticBatches(args), batch_size=None, shuffle=False)
    trainer.fit(module, train_dataloaders=data)
    if cuda:
        print(f"peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
              f"reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB", flush=True)
    print(f"done, {trainer.global_step} steps", flush=True)


if __name__ == "__main__":
    main()
