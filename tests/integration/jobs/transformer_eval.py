"""A Transformer classifier evaluated after every step on padded sequences: in eval mode under
no_grad, nn.TransformerEncoder takes its fast path through nested tensors (torch 1.13: one
tensor of the unpadded sequences). Usage: transformer_eval.py [--steps N] [--at S]; --at: the
embedding row of step S's first token becomes NaN before that step's forward (a corrupted
parameter). Seeded; prints "step K loss L acc A" after each step."""
import argparse

import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=True)
        self.head = nn.Linear(16, 2)

    def forward(self, tokens, padding):
        h = self.encoder(self.embed(tokens), src_key_padding_mask=padding)
        return self.head(h.mean(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--at", type=int, default=-1)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Classifier()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    val_tokens, val_labels = torch.randint(0, 50, (8, 12)), torch.randint(0, 2, (8,))
    padding = torch.zeros(8, 12, dtype=torch.bool)
    padding[:, 9:] = True
    for step in range(args.steps):
        model.train()
        tokens, labels = torch.randint(0, 50, (8, 12)), torch.randint(0, 2, (8,))
        if step == args.at:
            with torch.no_grad():
                model.embed.weight[tokens[0, 0]] = float("nan")
        loss = nn.functional.cross_entropy(model(tokens, padding), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            acc = model(val_tokens, padding).argmax(1).eq(val_labels).float().mean().item()
        print("step %d loss %.6f acc %.3f" % (step, loss.item(), acc), flush=True)


if __name__ == "__main__":
    main()
