"""A word-language-model loop as in PyTorch's examples/word_language_model: Embedding -> LSTM
-> Linear, no DataLoader, no optimizer (parameters updated by hand with p.data.add_). With
--nan-at B the embedding is poisoned before batch B, so the loss is NaN from that batch on."""
import argparse

import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--batches", type=int, default=6)
ap.add_argument("--nan-at", type=int, default=-1)
args = ap.parse_args()

torch.manual_seed(0)
ntoken, emsize, nhid, bptt, bsz = 50, 8, 8, 5, 4


class RNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.2)
        self.encoder = nn.Embedding(ntoken, emsize)
        self.rnn = nn.LSTM(emsize, nhid)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, x, hidden):
        emb = self.drop(self.encoder(x))
        out, hidden = self.rnn(emb, hidden)
        return self.decoder(self.drop(out)).view(-1, ntoken), hidden


model = RNNModel()
criterion = nn.NLLLoss()
data = torch.randint(0, ntoken, (bptt * (args.batches + 1), bsz))
hidden = (torch.zeros(1, bsz, nhid), torch.zeros(1, bsz, nhid))
lr = 0.5
for i in range(args.batches):
    x, y = data[i * bptt:(i + 1) * bptt], data[i * bptt + 1:(i + 1) * bptt + 1]
    if i == args.nan_at:
        model.encoder.weight.data[:] = float("nan")
    hidden = tuple(h.detach() for h in hidden)
    model.zero_grad()
    out, hidden = model(x, hidden)
    loss = criterion(torch.log_softmax(out, dim=1), y.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)
    print("batch %d loss %.6f" % (i, loss.item()), flush=True)
