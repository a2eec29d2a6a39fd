"""Graph classification with PyTorch Geometric: a GIN (graph isomorphism network, sum aggregation, sum pooling)
trained on synthetic random graphs of varying size and density, batched by torch_geometric.loader.DataLoader,
Adam, with a test-set accuracy after every epoch, the way PyG's own graph-classification examples run.

Every graph draws its number of nodes and its mean degree from a seeded RNG; its class is its mean-degree bucket
(so the GIN can learn it). A batch of graphs is one big disconnected graph whose node and edge counts change every
step, and so do the edges x hidden message tensors that every layer gathers and scatters.

    python3 examples/pyg_graphs.py [--steps 200] [--graphs 4000] [--batch 128] [--hidden 512] [--layers 5] ...

Defaults: 4000 training and 800 test graphs of 50-1000 nodes, mean degree 2-30, 32 node features, 5 GIN layers
of width 512, 128 graphs per batch (about 67k nodes and 1M directed edges on average). Needs torch_geometric.
"""
from __future__ import annotations

import argparse
import random
import time

import torch
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader
from torch_geometric.nn import MLP, GINConv, global_add_pool


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200, help="training steps (batches), over as many epochs as needed")
    p.add_argument("--graphs", type=int, default=4000, help="training graphs (and a fifth as many test graphs)")
    p.add_argument("--nodes", type=int, nargs=2, default=[50, 1000], metavar=("LOW", "HIGH"))
    p.add_argument("--degree", type=float, nargs=2, default=[2.0, 30.0], metavar=("LOW", "HIGH"),
                   help="mean degree, drawn per graph")
    p.add_argument("--features", type=int, default=32, help="node features")
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=5)
    p.add_argument("--batch", type=int, default=128, help="graphs per batch")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def random_graph(rng: random.Random, gen: torch.Generator, args: argparse.Namespace) -> Data:
    """An undirected random (multi)graph with a drawn size and mean degree, random features, its degree bucket as
    label. Each edge both ways, left uncoalesced: torch_geometric's to_undirected costs ms per graph on a CPU."""
    nodes, degree = rng.randint(*args.nodes), rng.uniform(*args.degree)
    pairs = torch.randint(nodes, (2, round(nodes * degree / 2)), generator=gen)
    pairs = pairs[:, pairs[0] != pairs[1]]   # no self-loops
    edge_index = torch.cat([pairs, pairs.flip(0)], 1)
    low, high = args.degree
    label = min(args.classes - 1, int((degree - low) / (high - low) * args.classes))
    return Data(x=torch.randn(nodes, args.features, generator=gen), edge_index=edge_index, y=torch.tensor([label]))


class GIN(torch.nn.Module):
    def __init__(self, args: argparse.Namespace):
        super().__init__()
        widths = [args.features] + [args.hidden] * args.layers
        self.convs = torch.nn.ModuleList(GINConv(MLP([w, args.hidden, args.hidden])) for w in widths[:-1])
        self.head = MLP([args.hidden, args.hidden, args.classes], norm=None, dropout=0.5)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor, graphs: int) -> torch.Tensor:
        for conv in self.convs:
            x = conv(x, edge_index).relu()
        return self.head(global_add_pool(x, batch, size=graphs))


@torch.no_grad()
def accuracy(model: GIN, loader: DataLoader, device: torch.device) -> float:
    model.eval()
    right = 0
    for data in loader:
        data = data.to(device)
        right += int((model(data.x, data.edge_index, data.batch, data.num_graphs).argmax(-1) == data.y).sum())
    model.train()
    return right / len(loader.dataset)


def main(argv=None) -> None:
    args = parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    rng, gen = random.Random(args.seed), torch.Generator().manual_seed(args.seed)
    graphs = [random_graph(rng, gen, args) for _ in range(args.graphs + args.graphs // 5)]
    train = DataLoader(graphs[:args.graphs], batch_size=args.batch, shuffle=True,
                       generator=torch.Generator().manual_seed(args.seed))
    test = DataLoader(graphs[args.graphs:], batch_size=args.batch)
    edges = sum(g.num_edges for g in graphs[:args.graphs])
    print(f"{args.graphs} training graphs, {edges / args.graphs:,.0f} directed edges each on average; {device}",
          flush=True)
    model = GIN(args).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    start, step, epoch = time.perf_counter(), 0, 0
    while step < args.steps:
        epoch += 1
        for data in train:
            data = data.to(device)
            loss = torch.nn.functional.cross_entropy(model(data.x, data.edge_index, data.batch, data.num_graphs),
                                                     data.y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step == args.steps:
                break
        print(f"epoch {epoch} step {step}/{args.steps} loss {loss.item():.3f} "
              f"test accuracy {accuracy(model, test, device):.3f} {step / (time.perf_counter() - start):.1f} steps/s",
              flush=True)
    if device.type == "cuda":
        print(f"peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
              f"reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB", flush=True)
    print(f"done, {step} steps", flush=True)


if __name__ == "__main__":
    main()
